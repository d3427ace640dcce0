"""Channel gating, squeeze-and-excitation style: one gate per channel from the map's global mean.

squeeze: v's global average pool, (B, C, 1, 1); excite: two 1x1 layers through C // reduction
channels and a sigmoid; the gate rescales v's channels. O(N C) work; the output at a pixel depends on
the whole map through the mean (as dense attention's does), so tiles see their own means.
"""

from __future__ import annotations

import torch

from .gates import ChannelMLP, GateBranch
from .registry import register_attention


class ChannelGate(GateBranch):
    def __init__(
        self, dim: int, heads: int, reduction: int = 4, positional: bool = True, stride: int = 1
    ) -> None:
        super().__init__(dim, heads, positional, stride)
        self.excite = ChannelMLP(dim, reduction)

    def attend(self, q, k, v, x, aux):
        squeeze = v.mean(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
        return v * torch.sigmoid(self.excite(squeeze))  # (B, C, H, W)


@register_attention("channel", summary=("reduction", "stride"))
def build_channel(dim: int, heads: int, index: int, *, reduction: int = 4, stride: int = 1) -> ChannelGate:
    return ChannelGate(dim, heads, reduction=reduction, stride=stride)
