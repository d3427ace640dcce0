"""The tiered inference path of routed attention, in plain torch, over token rows.

Inference keeps the maps as token rows (B*H*W, C) (:func:`token_rows`: a view of a channels-last
map, no copy); :func:`region_token_ids` names each region's rows. :func:`tiered_attention` groups
query regions into tiers of equal k and gathers each tier's query and key tokens straight from the
rows. It is what :func:`~.routing.region_attention` runs where the fused kernel does not, and the
reference the kernel (:mod:`.native`) is checked against before it is used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def token_rows(t: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B*H*W, C) token rows: a view for a channels-last map (a copy otherwise)."""
    return t.permute(0, 2, 3, 1).reshape(-1, t.shape[1])


def from_token_rows(rows: torch.Tensor, b: int, h: int, w: int) -> torch.Tensor:
    """Inverse of :func:`token_rows`: (B*H*W, C) -> (B, C, H, W), channels-last (a view)."""
    return rows.view(b, h, w, -1).permute(0, 3, 1, 2)


def region_token_ids(b: int, h: int, w: int, p: int, device: torch.device) -> torch.Tensor:
    """(B*N, p*p) row ids into :func:`token_rows` of each p x p region's tokens; regions row-major."""
    ry = torch.arange(h // p, device=device)[:, None, None, None] * p
    rx = torch.arange(w // p, device=device)[None, :, None, None] * p
    dy = torch.arange(p, device=device)[None, None, :, None]
    dx = torch.arange(p, device=device)[None, None, None, :]
    ids = ((ry + dy) * w + rx + dx).reshape(-1, p * p)  # (N, P) within one image
    return (ids[None] + (h * w) * torch.arange(b, device=device)[:, None, None]).flatten(0, 1)


def tiered_attention(
    q_rows: torch.Tensor, k_rows: torch.Tensor, v_rows: torch.Tensor, tokens: torch.Tensor,
    idx: torch.Tensor, k_int: torch.Tensor, heads: int, max_gather: int = 4096, stats: dict | None = None,
) -> torch.Tensor:
    """Hard top-k region attention with a per-region k, grouped into tiers of equal k.

    q_rows, k_rows, v_rows: (T, C) token rows (:func:`token_rows`); tokens: (B*N, P) token ids of
    each region (:func:`region_token_ids`); idx: (B, N, >= max k) key region ids per image, best
    first; k_int: (B, N) integer k per query region (0 = no attention: its output stays zero). Tier t
    gathers its query regions' tokens and exactly t key regions per query region, so copies and
    scores follow the budget; each call gathers at most ``max_gather`` key regions, bounding the
    temporaries. ``stats``, if given, receives ``gathered`` (key regions) and ``calls`` (SDPA calls).
    Returns (T, C) output rows.
    """
    c = q_rows.shape[1]
    d = c // heads
    b, n, _ = idx.shape
    pp = tokens.shape[1]
    flat_idx = (idx + n * torch.arange(b, device=idx.device)[:, None, None]).flatten(0, 1)  # (B*N, k)
    k_flat = k_int.reshape(-1)
    tiers = [t for t in torch.unique(k_flat).tolist() if t > 0]
    out = q_rows.new_empty(q_rows.shape)  # (T, C); every token is written once, below or by its tier
    skipped = (k_flat == 0).nonzero().squeeze(1)
    if skipped.numel():
        out.index_fill_(0, tokens[skipped].flatten(), 0.0)  # k = 0: attention skipped, the output is 0
    gathered = calls = 0
    for t in tiers:
        rows = (k_flat == t).nonzero().squeeze(1)  # query regions of this tier
        step = max(1, max_gather // t)
        for start in range(0, rows.numel(), step):
            r = rows[start : start + step]
            m = r.numel()
            q_ids = tokens[r].flatten()  # (m*P,)
            kv_ids = tokens[flat_idx[r, :t]].flatten()  # (m*t*P,), key regions in rank order
            # (m, heads, L, d) views of gathered rows: SDPA reads them strided, no layout copies
            qg = q_rows.index_select(0, q_ids).view(m, pp, heads, d).transpose(1, 2)
            kg = k_rows.index_select(0, kv_ids).view(m, t * pp, heads, d).transpose(1, 2)
            vg = v_rows.index_select(0, kv_ids).view(m, t * pp, heads, d).transpose(1, 2)
            res = F.scaled_dot_product_attention(qg, kg, vg)  # (m, heads, P, d); scores m x P x tP
            # under autocast SDPA answers in the autocast dtype; the rows keep theirs
            out.index_copy_(0, q_ids, res.transpose(1, 2).reshape(m * pp, c).to(out.dtype))
            gathered, calls = gathered + m * t, calls + 1
    if stats is not None:
        stats["gathered"] = stats.get("gathered", 0) + gathered
        stats["calls"] = stats.get("calls", 0) + calls
    return out
