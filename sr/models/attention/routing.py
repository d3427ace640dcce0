"""Region routing shared by ``topk`` and ``adaptive``: pooled coarse scores, top-k, gathers.

Coarse scoring pools q and k over p x p regions and scores N pooled queries against N pooled keys
(N = HW / p^2), so it costs (HW / p^2)^2 * C instead of (HW)^2 * C. It runs in query chunks so its
memory stays linear in N.

Two layouts: training uses (B, N, P, C) region tokens (``to_regions``); inference uses head-major
(heads, B*N, P, d) (``to_head_regions``), where a gather of key regions is one ``index_select`` and
the gathered keys are already SDPA's (batch, heads, L, d) shape, so no permute copies per tier.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import large_negative, merge_heads, split_heads


@torch.no_grad()
def coarse_topk(qr: torch.Tensor, kr: torch.Tensor, k: int, chunk: int = 256) -> torch.Tensor:
    """Indices of each query region's top-k key regions by pooled score.

    qr, kr: (B, N, P, C) region tokens. Returns (B, N, k) int64, best first. Selection is not
    differentiable (gradients reach q and k through the fine attention instead).
    """
    return pooled_topk(qr.float().mean(2), kr.float().mean(2), k, chunk)


@torch.no_grad()
def pooled_topk(qc: torch.Tensor, kc: torch.Tensor, k: int, chunk: int = 256) -> torch.Tensor:
    """Top-k of pooled scores: qc, kc (B, N, C) region means -> (B, N, k) int64, best first."""
    kt = kc.transpose(1, 2)
    out = []
    for start in range(0, qc.shape[1], chunk):
        # (B, n, N): memory chunk * N, never N^2; small chunks also stay cache-resident for topk
        scores = qc[:, start : start + chunk] @ kt
        out.append(scores.topk(k, dim=-1).indices)
    return torch.cat(out, dim=1)


def region_means(th: torch.Tensor, b: int) -> torch.Tensor:
    """Head-major regions (heads, B*N, P, d) -> (B, N, heads*d) fp32 region means for coarse scoring."""
    heads, bn, _, d = th.shape
    return th.float().mean(2).view(heads, b, bn // b, d).permute(1, 2, 0, 3).reshape(b, bn // b, heads * d)


def to_head_regions(x: torch.Tensor, p: int, heads: int) -> torch.Tensor:
    """(B, C, H, W), H and W multiples of p -> (heads, B*N, p*p, C/heads); regions row-major per image."""
    b, c, h, w = x.shape
    x = x.view(b, heads, c // heads, h // p, p, w // p, p)
    return x.permute(1, 0, 3, 5, 4, 6, 2).reshape(heads, b * (h // p) * (w // p), p * p, c // heads)


def from_head_regions(x: torch.Tensor, b: int, h: int, w: int, p: int) -> torch.Tensor:
    """Inverse of :func:`to_head_regions`: (heads, B*N, p*p, d) -> (B, heads*d, H, W)."""
    heads, _, _, d = x.shape
    x = x.view(heads, b, h // p, w // p, p, p, d)
    return x.permute(1, 0, 6, 2, 4, 3, 5).reshape(b, heads * d, h, w)


def tiered_attention(
    qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, idx: torch.Tensor, k_int: torch.Tensor,
    max_gather: int = 4096, stats: dict | None = None,
) -> torch.Tensor:
    """Hard top-k region attention with a per-region k, grouped into tiers of equal k.

    qh, kh, vh: (heads, B*N, P, d) from :func:`to_head_regions`; idx: (B, N, >= max k) key region
    ids per image, best first; k_int: (B, N) integer k per query region (0 = no attention: the
    output stays zero). Each call gathers at most ``max_gather`` key regions, so the temporaries stay
    bounded whatever the map size. ``stats``, if given, receives ``gathered`` (key regions gathered)
    and ``calls`` (SDPA calls). Returns (heads, B*N, P, d).
    """
    heads, bn, pp, d = qh.shape
    b, n, _ = idx.shape
    flat_idx = (idx + n * torch.arange(b, device=idx.device)[:, None, None]).flatten(0, 1)  # (B*N, k)
    k_flat = k_int.reshape(bn)
    tiers = [t for t in torch.unique(k_flat).tolist() if t > 0]
    whole = tiers == [int(k_flat[0])]  # one tier covering every region: no row gathers or scatter
    out = None
    if not whole:
        out = qh.new_empty(qh.shape)
        skipped = (k_flat == 0).nonzero().squeeze(1)
        if skipped.numel():
            out.index_fill_(1, skipped, 0.0)  # k = 0: attention skipped, the output is zero
    gathered = calls = 0
    for t in tiers:
        rows = torch.arange(bn, device=qh.device) if whole else (k_flat == t).nonzero().squeeze(1)
        step = max(1, max_gather // t)
        for start in range(0, rows.numel(), step):
            r = rows[start : start + step]
            m = r.numel()
            ids = flat_idx[r, :t].reshape(-1)  # (m*t,)
            kg = kh.index_select(1, ids).view(heads, m, t * pp, d)
            vg = vh.index_select(1, ids).view(heads, m, t * pp, d)
            qg = qh[:, start : start + m] if whole else qh.index_select(1, r)
            res = F.scaled_dot_product_attention(qg, kg, vg)  # (heads, m, P, d); scores m x P x tP
            gathered, calls = gathered + m * t, calls + 1
            if whole and m == bn:
                out = res
                continue
            if out is None:
                out = qh.new_empty(qh.shape)
            if whole:
                out[:, start : start + m] = res
            else:
                out.index_copy_(1, r, res)
    if out is None:  # every region has k = 0
        out = qh.new_zeros(qh.shape)
    if stats is not None:
        stats["gathered"] = stats.get("gathered", 0) + gathered
        stats["calls"] = stats.get("calls", 0) + calls
    return out


def gather_regions(t: torch.Tensor, batch_index: torch.Tensor, region_index: torch.Tensor) -> torch.Tensor:
    """t: (B, N, P, C); batch_index broadcastable to region_index (..., k) -> (..., k, P, C)."""
    return t[batch_index, region_index]


def region_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Fine attention of each query region over its gathered key regions, as one batched SDPA.

    q: (M, P, C); k, v: (M, K, P, C); bias: (M, K) additive score bias per key region or None.
    Returns (M, P, C). Scores are (M, heads, P, K*P): never (HW) x (HW).
    """
    m, kk, p, c = k.shape
    qh = split_heads(q, heads)  # (M, heads, P, d)
    kh = split_heads(k.reshape(m, kk * p, c), heads)  # (M, heads, K*P, d)
    vh = split_heads(v.reshape(m, kk * p, c), heads)
    mask = None
    if bias is not None:
        # Clamp before the cast: fp32's large negative would become -inf in fp16 (NaN on blocked rows).
        bias = bias.clamp_min(large_negative(qh.dtype)).to(qh.dtype)
        mask = bias.repeat_interleave(p, dim=1)[:, None, None, :]  # (M, 1, 1, K*P)
    return merge_heads(F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask))


def rank_mask_bias(budget: torch.Tensor, k_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Soft top-k over ranks: region of rank r counts with weight clamp(k - r, 0, 1).

    budget: (...,) continuous k in [0, k_max]. Returns (weights (..., k_max), log-weight bias
    (..., k_max)) where a zero weight becomes a dtype-safe large negative. At integer k this is
    exactly hard top-k, so training and inference agree.
    """
    ranks = torch.arange(k_max, device=budget.device, dtype=budget.dtype)
    weights = (budget[..., None] - ranks).clamp(0, 1)
    bias = torch.where(weights > 0, weights.clamp_min(1e-4).log(), large_negative(weights.dtype))
    return weights, bias
