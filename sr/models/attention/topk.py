"""Top-k region attention with a fixed k (steps 1-3 of ASA, no gate)."""

from __future__ import annotations

from .common import AttentionBranch, pad_to_multiple
from .routing import from_token_rows, region_token_ids, route, tiered_attention, token_rows


class TopkAttention(AttentionBranch):
    def __init__(
        self, dim: int, heads: int, region: int = 4, k: int = 4, positional: bool = True, stride: int = 1,
        two_level_above: int | None = 512,
    ) -> None:
        super().__init__(dim, heads, positional, stride)
        self.region, self.k, self.two_level_above = region, k, two_level_above

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        p = self.region
        q, k, v, xp = (pad_to_multiple(t, p)[0] for t in (q, k, v, x))
        hp, wp = q.shape[-2:]
        grid = (hp // p, wp // p)
        kk = min(self.k, grid[0] * grid[1])
        idx = route(*self.pooled_qk(xp, p), grid, kk, self.two_level_above)  # (B, N, k), best first
        k_int = idx.new_full(idx.shape[:2], kk)  # one tier: every region
        tokens = region_token_ids(b, hp, wp, p, q.device)
        rows = tiered_attention(token_rows(q), token_rows(k), token_rows(v), tokens, idx, k_int, self.heads)
        return from_token_rows(rows, b, hp, wp)[:, :, :h, :w]
