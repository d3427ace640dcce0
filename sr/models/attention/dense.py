"""Dense multi-head self-attention over all H*W tokens: the O(N^2) reference."""

from __future__ import annotations

import torch.nn.functional as F

from .common import AttentionBranch
from .registry import register_attention


class DenseAttention(AttentionBranch):
    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        d = c // self.heads
        # (B, C, H, W) -> (B, heads, HW, d), contiguous: SDPA's fused (flash) CPU kernel needs a unit
        # stride in d, otherwise it falls back to the math path that materialises the (HW)^2 matrix.
        q, k, v = (t.reshape(b, self.heads, d, h * w).transpose(2, 3).contiguous() for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)  # (B, heads, HW, d)
        return out.transpose(2, 3).reshape(b, c, h, w)


@register_attention("dense")
def build_dense(dim: int, heads: int, index: int, *, stride: int = 1) -> DenseAttention:
    return DenseAttention(dim, heads, stride=stride)
