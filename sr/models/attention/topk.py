"""Top-k region attention with a fixed k (steps 1-3 of ASA, no gate)."""

from __future__ import annotations

import torch

from .common import AttentionBranch, pad_to_multiple
from .routing import from_head_regions, pooled_topk, region_means, tiered_attention, to_head_regions


class TopkAttention(AttentionBranch):
    def __init__(
        self, dim: int, heads: int, region: int = 4, k: int = 4, positional: bool = True, stride: int = 1
    ) -> None:
        super().__init__(dim, heads, positional, stride)
        self.region, self.k = region, k

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        p = self.region
        q, k, v = (pad_to_multiple(t, p)[0] for t in (q, k, v))
        hp, wp = q.shape[-2:]
        n = (hp // p) * (wp // p)
        kk = min(self.k, n)
        qh, kh, vh = (to_head_regions(t, p, self.heads) for t in (q, k, v))  # (heads, B*N, P, d)
        idx = pooled_topk(region_means(qh, b), region_means(kh, b), kk)  # (B, N, k), best first
        k_int = torch.full((b, n), kk, dtype=torch.long, device=q.device)  # one tier: every region
        out = tiered_attention(qh, kh, vh, idx, k_int)
        return from_head_regions(out, b, hp, wp, p)[:, :, :h, :w]
