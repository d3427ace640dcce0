"""CBAM's spatial attention: one sigmoid weight per pixel from the channel-wise mean and max maps.

The (B, 2, H, W) mean and max maps go through one k x k conv (k = ``spatial_kernel``, 7 in CBAM) and
a sigmoid; the map rescales v at every pixel. O(N C) work, and each pixel sees only its k x k
neighbourhood of the (stride-pooled) map, as in a conv: a tile that starts on the pooling grid
(``align``) and overlaps the next by the block's reach computes what the whole image does.
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

    @property
    def align(self) -> int:
        return self.stride  # local: a tile matches the whole image where its pooling grid does

    def attend(self, q, k, v, x, aux):
        return v * torch.sigmoid(self.spatial(v))  # (B, C, H, W) * (B, 1, H, W)


@register_attention("spatial", summary=("spatial_kernel", "stride"))
def build_spatial(
    dim: int, heads: int, index: int, *, spatial_kernel: int = 7, stride: int = 1
) -> SpatialGate:
    return SpatialGate(dim, heads, spatial_kernel=spatial_kernel, stride=stride)
