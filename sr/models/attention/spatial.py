"""CBAM's spatial attention: one sigmoid weight per pixel from the channel-wise mean and max maps.

The (B, 2, H, W) mean and max maps go through one k x k conv (k = ``spatial_kernel``, 7 in CBAM) and
a sigmoid; the map rescales v at every pixel. O(N C) work, and each pixel sees only its k x k
neighbourhood, so tiled inference with an overlap of k // 2 matches the whole image.
"""

from __future__ import annotations

import torch

from .gates import GateBranch, SpatialMap
from .registry import register_attention


class SpatialGate(GateBranch):
    def __init__(
        self, dim: int, heads: int, spatial_kernel: int = 7, positional: bool = True, stride: int = 1
    ) -> None:
        super().__init__(dim, heads, positional, stride)
        self.spatial = SpatialMap(spatial_kernel)

    def attend(self, q, k, v, x, aux):
        return v * torch.sigmoid(self.spatial(v))  # (B, C, H, W) * (B, 1, H, W)


@register_attention("spatial", summary=("spatial_kernel", "stride"))
def build_spatial(
    dim: int, heads: int, index: int, *, spatial_kernel: int = 7, stride: int = 1
) -> SpatialGate:
    return SpatialGate(dim, heads, spatial_kernel=spatial_kernel, stride=stride)
