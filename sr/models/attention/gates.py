"""Pieces of the gating kinds (``channel``, ``spatial``, ``cbam``): the value-only frame and the two gates.

A gate rescales the features it is computed from (Hu et al., squeeze-and-excitation; Woo et al.,
CBAM): there are no queries or keys. So the gating kinds keep the family's frame,
``x + proj(gate(v) * v + lepe(v))``, but their input projection makes v alone: a third of the
attention kinds' qkv conv, and no parameter left without a gradient (DDP refuses unused ones).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .common import AttentionBranch


class GateBranch(AttentionBranch):
    """The frame of the gating kinds: v = a 1x1 conv of x; subclasses' ``attend`` returns gate * v.

    The conv keeps the family's name ``qkv`` (the trainer finds attention blocks in a checkpoint by
    it) but has C outputs, v only; ``project`` returns (None, None, v).
    """

    def __init__(self, dim: int, heads: int, positional: bool = True, stride: int = 1) -> None:
        super().__init__(dim, heads, positional, stride)
        self.qkv = nn.Conv2d(dim, dim, 1)

    def project(self, x: torch.Tensor) -> tuple[None, None, torch.Tensor]:
        return None, None, self.qkv(x)  # v: (B, C, H, W)


class ChannelMLP(nn.Module):
    """SE's excitation: pooled channels (B, C, 1, 1) -> gate logits (B, C, 1, 1), through C // reduction."""

    def __init__(self, dim: int, reduction: int = 4) -> None:
        super().__init__()
        if not isinstance(reduction, int) or not 1 <= reduction <= dim:
            raise ValueError(f"reduction must be an integer in [1, {dim}] (the channels), got {reduction!r}")
        hidden = dim // reduction
        self.fc1 = nn.Conv2d(dim, hidden, 1)
        self.fc2 = nn.Conv2d(hidden, dim, 1)

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(s)))


class SpatialMap(nn.Module):
    """CBAM's spatial attention: features (B, C, H, W) -> map logits (B, 1, H, W).

    The channel-wise mean and max maps, (B, 2, H, W), through one k x k conv (zero padding, so the
    output keeps the input's size and a pixel sees only its k x k neighbourhood).
    """

    def __init__(self, kernel: int = 7) -> None:
        super().__init__()
        if not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"spatial_kernel must be an odd positive integer, got {kernel!r}")
        self.conv = nn.Conv2d(2, 1, kernel, padding=kernel // 2)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        stats = torch.cat([v.mean(dim=1, keepdim=True), v.amax(dim=1, keepdim=True)], dim=1)  # (B, 2, H, W)
        return self.conv(stats)
