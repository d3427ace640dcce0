"""Region routing shared by ``topk`` and ``adaptive``: pooled coarse scores, top-k, gathers.

Coarse scoring pools q and k over p x p regions and scores N pooled queries against N pooled keys
(N = HW / p^2), so it costs (HW / p^2)^2 * C instead of (HW)^2 * C. It runs in query chunks so its
memory stays linear in N.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import large_negative, merge_heads, split_heads


@torch.no_grad()
def coarse_topk(qr: torch.Tensor, kr: torch.Tensor, k: int, chunk: int = 1024) -> torch.Tensor:
    """Indices of each query region's top-k key regions by pooled score.

    qr, kr: (B, N, P, C) region tokens. Returns (B, N, k) int64, best first. Selection is not
    differentiable (gradients reach q and k through the fine attention instead).
    """
    qc, kc = qr.float().mean(2), kr.float().mean(2)  # (B, N, C)
    out = []
    for start in range(0, qc.shape[1], chunk):
        scores = qc[:, start : start + chunk] @ kc.transpose(1, 2)  # (B, n, N)
        out.append(scores.topk(k, dim=-1).indices)
    return torch.cat(out, dim=1)


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
        mask = bias.to(qh.dtype).repeat_interleave(p, dim=1)[:, None, None, :]  # (M, 1, 1, K*P)
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
