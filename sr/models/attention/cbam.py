"""CBAM (Woo et al. 2018): a channel gate, then a spatial map on the gated features.

channel: sigmoid(MLP(avg-pool(v)) + MLP(max-pool(v))), one shared MLP through C // reduction
channels; spatial: :class:`~.gates.SpatialMap` (channel mean and max maps -> k x k conv) of the
channel-gated map, sigmoid. Both rescale: out = Ms(v') * v' with v' = Mc(v) * v. O(N C) work.
"""

from __future__ import annotations

import torch

from .gates import ChannelMLP, GateBranch, SpatialMap
from .registry import register_attention


class CBAM(GateBranch):
    def __init__(
        self, dim: int, heads: int, reduction: int = 4, spatial_kernel: int = 7, positional: bool = True,
        stride: int = 1,
    ) -> None:
        super().__init__(dim, heads, positional, stride)
        self.excite = ChannelMLP(dim, reduction)
        self.spatial = SpatialMap(spatial_kernel)

    def attend(self, q, k, v, x, aux):
        avg = v.mean(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
        peak = v.amax(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
        v = v * torch.sigmoid(self.excite(avg) + self.excite(peak))  # channel-gated, (B, C, H, W)
        return v * torch.sigmoid(self.spatial(v))  # (B, C, H, W) * (B, 1, H, W)


@register_attention("cbam", summary=("reduction", "spatial_kernel", "stride"))
def build_cbam(
    dim: int, heads: int, index: int, *, reduction: int = 4, spatial_kernel: int = 7, stride: int = 1
) -> CBAM:
    return CBAM(dim, heads, reduction=reduction, spatial_kernel=spatial_kernel, stride=stride)
