"""Top-k region attention with a fixed k (steps 1-3 of ASA, no gate)."""

from __future__ import annotations

import torch

from .common import AttentionBranch, from_regions, pad_to_multiple, to_regions
from .routing import coarse_topk, gather_regions, region_attention


class TopkAttention(AttentionBranch):
    def __init__(self, dim: int, heads: int, region: int = 4, k: int = 4, positional: bool = True, stride: int = 1
    ):
        super().__init__(dim, heads, positional, stride)
        self.region, self.k = region, k

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        p = self.region
        qkv, _, _ = pad_to_multiple(torch.cat([q, k, v], 1), p)
        hp, wp = qkv.shape[-2:]
        qr, kr, vr = (to_regions(t, p) for t in qkv.chunk(3, dim=1))  # (B, N, P, C)
        n = qr.shape[1]
        idx = coarse_topk(qr, kr, min(self.k, n))  # (B, N, k)
        bi = torch.arange(b, device=q.device)[:, None, None]
        out = region_attention(
            qr.reshape(b * n, p * p, c),
            gather_regions(kr, bi, idx).flatten(0, 1),  # (B*N, k, P, C)
            gather_regions(vr, bi, idx).flatten(0, 1),
            self.heads,
        )
        return from_regions(out.view(b, n, p * p, c), hp, wp, p)[:, :, :h, :w]
