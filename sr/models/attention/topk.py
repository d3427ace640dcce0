"""Top-k region attention with a fixed k (steps 1-3 of ASA, no gate); tiered or fixed-shape inference."""

from __future__ import annotations

import torch

from .common import AttentionBranch, pad_to_multiple
from .registry import register_attention
from .routing import routed_attention, static_routed_attention


class TopkAttention(AttentionBranch):
    has_static_path = True

    def __init__(
        self, dim: int, heads: int, region: int = 4, k: int = 4, positional: bool = True, stride: int = 1,
        two_level_above: int | None = 512,
    ) -> None:
        super().__init__(dim, heads, positional, stride)
        self.region, self.k, self.two_level_above = region, k, two_level_above
        self.static = False  # inference path: tiered (False) or fixed-shape (True); see set_attention_path

    @property
    def align(self) -> int:
        return self.stride * self.region  # regions tile the stride-pooled map from its top left

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        p = self.region
        static = self.static and not (self.training and torch.is_grad_enabled())
        q, k, v, xp = (pad_to_multiple(t, p, always=static)[0] for t in (q, k, v, x))
        n = (q.shape[-2] // p) * (q.shape[-1] // p)
        if static:
            k_map = torch.full((b, n), torch.sym_min(self.k, n), dtype=torch.float32, device=q.device)
            out = static_routed_attention(q, k, v, self.pooled_qk(xp, p), k_map, self.k, self.heads, p)
            # a fresh copy: the crop's strides depend on the padding (a guard per size class when compiled)
            return out[:, :, :h, :w].clone(memory_format=torch.channels_last)
        k_top = min(self.k, n)
        k_int = torch.full((b, n), k_top, dtype=torch.long, device=q.device)  # one tier
        means = self.pooled_qk(xp, p)
        out = routed_attention(q, k, v, means, k_int, k_top, self.heads, p, self.two_level_above)
        return out[:, :, :h, :w]


@register_attention("topk")
def build_topk(
    dim: int, heads: int, index: int, *, region: int = 4, k: int = 4, stride: int = 1
) -> TopkAttention:
    return TopkAttention(dim, heads, region=region, k=k, stride=stride)
