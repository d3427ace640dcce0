"""Dense multi-head self-attention over all H*W tokens: the O(N^2) reference."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import AttentionBranch, merge_heads, split_heads


class DenseAttention(AttentionBranch):
    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        # (B, C, H, W) -> (B, heads, HW, d)
        q, k, v = (split_heads(t.flatten(2).transpose(1, 2), self.heads) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)  # (B, heads, HW, d)
        return merge_heads(out).transpose(1, 2).reshape(b, c, h, w)
