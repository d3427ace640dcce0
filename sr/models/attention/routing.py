"""Region routing shared by ``topk`` and ``adaptive``: pooled coarse scores, top-k, gathers.

Coarse scoring pools q and k over p x p regions and scores N pooled queries against N pooled keys
(N = HW / p^2), so it costs (HW / p^2)^2 * C instead of (HW)^2 * C. It runs in query chunks so its
memory stays linear in N.

Two layouts: training uses (B, heads, N, P, d) region tokens (``to_head_regions``); inference keeps
the maps as token rows (B*H*W, C) (:mod:`.tiered`: a view of a channels-last map, no copy) and gathers
each tier's query and key tokens straight from them, so the only copies are the gathers themselves,
which follow the budget, and the scatter of the outputs.

The tiered inference path reads the budgets on the host and loops over tiers of data-dependent size:
cheapest on CPU, where compute follows the budget, but a host sync and a new kernel shape per tier
on a GPU, and opaque to ``torch.compile`` and ONNX. :func:`static_routed_attention` is the same
attention with fixed shapes: k_max key regions for every query region, the per-region budget applied
as a mask, no host reads and no Python loops whose trip count depends on the data or the size.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from . import native
from .common import from_head_regions, large_negative, to_head_regions
from .tiered import from_token_rows, region_token_ids, tiered_attention, token_rows


def topk_indices(scores: torch.Tensor, k: int) -> torch.Tensor:
    """``scores.topk(k, dim=-1).indices``, avoiding a slow path of PyTorch's CPU top-k.

    On CPU, rows shorter than 64k take an nth_element path that costs ~2.5 ns per element and grows
    with the row (0.66 ms for 256 rows of 256 at k = 8, one thread); padding the rows with -inf to
    64k + 1 columns selects the partial-sort path instead (0.44 ms; at k = 5: 0.58 -> 0.24 ms).
    Padding pays while the padded row is at most ~2.5x the row; the indices are identical.
    """
    n = scores.shape[-1]
    width = 64 * k + 1
    if scores.device.type == "cpu" and n < width <= 2.5 * n:
        pad = scores.new_full((*scores.shape[:-1], width - n), float("-inf"))
        scores = torch.cat([scores, pad], dim=-1)
    return scores.topk(k, dim=-1).indices


@torch.no_grad()
def pooled_topk(qc: torch.Tensor, kc: torch.Tensor, k: int, chunk: int = 256) -> torch.Tensor:
    """Top-k of pooled scores: qc, kc (B, N, C) region means -> (B, N, k) int64, best first."""
    kt = kc.transpose(1, 2)
    out = []
    for start in range(0, qc.shape[1], chunk):
        # (B, n, N): memory chunk * N, never N^2; small chunks also stay cache-resident for topk
        scores = qc[:, start : start + chunk] @ kt
        out.append(topk_indices(scores, k))
    return torch.cat(out, dim=1)


@functools.lru_cache(maxsize=8)
def _group_members(grid: tuple[int, int], device: torch.device) -> torch.Tensor:
    """(S, 4) ids of the regions in each 2x2 group of a (Hr, Wr) grid, -1 past the grid's edge.

    Cached per grid (tiles repeat their sizes); callers only read it."""
    hr, wr = grid
    offset = torch.arange(2, device=device)
    ry = torch.arange((hr + 1) // 2, device=device)[:, None, None, None] * 2 + offset[:, None]  # (Hs,1,2,1)
    rx = torch.arange((wr + 1) // 2, device=device)[None, :, None, None] * 2 + offset  # (1,Ws,1,2)
    return torch.where((ry < hr) & (rx < wr), ry * wr + rx, -1).reshape(-1, 4)


def _group_means(t: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(B, N, C) on a (Hr, Wr) grid -> (B, S, C) means of 2x2 groups (edge groups average what they hold)."""
    b, _, c = t.shape
    return F.avg_pool2d(t.transpose(1, 2).reshape(b, c, *grid), 2, ceil_mode=True).flatten(2).transpose(1, 2)


@torch.no_grad()
def two_level_topk(
    qc: torch.Tensor, kc: torch.Tensor, grid: tuple[int, int], k: int, keep: int | None = None,
    chunk: int = 256,
) -> torch.Tensor:
    """Coarse-to-fine top-k: route 2x2 groups of query regions to 2x2 groups of key regions first.

    qc, kc: (B, N, C) region means on a (Hr, Wr) grid, row-major. Level 1 scores group means
    against group means and keeps each query group's ``keep`` best key groups (default 2k, at
    least 4); level 2 scores each query region against the regions of those groups and keeps its
    top-k. The exact single-level routing (:func:`pooled_topk`) costs N^2 * C and a top-k over N per
    query; this costs (N/4)^2 * C + N * 4 keep * C and top-k over N/4 per query group, so at large N
    routing stops outgrowing the fine attention. It equals :func:`pooled_topk` whenever each query's
    true top-k lie in its group's kept groups (always when ``keep`` covers every group).
    Returns (B, N, k) int64, best first.
    """
    b, n, c = kc.shape
    members = _group_members(grid, kc.device)  # (S, 4)
    s_count = members.shape[0]
    keep = min(s_count, keep if keep is not None else max(2 * k, 4))
    qs, ks = _group_means(qc, grid), _group_means(kc, grid)  # (B, S, C)
    dummy = members.new_tensor(n)  # id -1 reads an extra zero row, masked out of every top-k
    members = torch.where(members < 0, dummy, members)
    batch_offset = (n + 1) * torch.arange(b, device=kc.device)
    k_rows = torch.cat([kc, kc.new_zeros(b, 1, c)], 1).flatten(0, 1)  # (B*(N+1), C)
    q_rows = torch.cat([qc, qc.new_zeros(b, 1, c)], 1).flatten(0, 1)
    out = kc.new_empty((b, n + 1, k), dtype=torch.long)
    for start in range(0, s_count, chunk):
        groups = members[start : start + chunk]  # (m, 4) query regions of these query groups
        m = groups.shape[0]
        best_groups = topk_indices(qs[:, start : start + chunk] @ ks.transpose(1, 2), keep)
        cand = members[best_groups].flatten(2)  # (B, m, 4 keep) key region ids (n = none)
        kg = k_rows.index_select(0, (cand + batch_offset[:, None, None]).flatten()).view(b, m, -1, c)
        qg = q_rows.index_select(0, (groups + batch_offset[:, None, None]).flatten()).view(b, m, 4, c)
        scores = (qg @ kg.transpose(-1, -2)).masked_fill((cand == n)[:, :, None], float("-inf"))
        best = topk_indices(scores, k)  # (B, m, 4, k) positions among the candidates
        ids = cand[:, :, None].expand(-1, -1, 4, -1).gather(-1, best)  # (B, m, 4, k)
        out[:, groups.flatten()] = ids.flatten(1, 2)  # row n collects the padding queries
    return out[:, :n]


@torch.no_grad()
def route(
    qc: torch.Tensor, kc: torch.Tensor, grid: tuple[int, int], k: int, two_level_above: int | None
) -> torch.Tensor:
    """Each query region's top-k key regions: exact single-level scoring up to ``two_level_above``
    regions, coarse-to-fine (:func:`two_level_topk`) beyond (None = always exact)."""
    hr, wr = grid
    if two_level_above is None or hr * wr <= two_level_above or 4 * max(2 * k, 4) >= hr * wr:
        return pooled_topk(qc, kc, k)
    return two_level_topk(qc, kc, grid, k)


def own_region_first(idx: torch.Tensor) -> torch.Tensor:
    """Rank 0 becomes each query region's own region; the routed regions follow in their order.

    Pooled scoring almost never ranks a region's own keys first (under 1% of the kept picks of the
    shipped x4), so routed attention alone sees only distant regions and leaves the local
    neighbourhood to the convs. With the own region first, a budget of k is the region itself plus
    its k - 1 best distant regions. The own region is dropped where routing had picked it, and the
    last routed pick is dropped where it had not, so the shape stays (B, N, K) and the ids distinct.
    """
    b, n, kk = idx.shape
    own = torch.arange(n, device=idx.device).view(1, n, 1)  # (1, N, 1)
    ranks = torch.arange(kk, device=idx.device, dtype=torch.float32)
    # a priority that falls with the rank and puts the own region last: top-(K-1) keeps the routed order
    priority = (kk - ranks) - (kk + 1) * (idx == own).float()  # (B, N, K)
    rest = idx.gather(-1, priority.topk(kk - 1, dim=-1).indices)  # (B, N, K-1)
    return torch.cat([own.expand(b, n, 1), rest], dim=-1)


@functools.lru_cache(maxsize=8)
def _cached_token_ids(b: int, h: int, w: int, p: int) -> torch.Tensor:
    """:func:`region_token_ids` on the CPU, cached per size (tiles repeat theirs); callers only read it."""
    return region_token_ids(b, h, w, p, torch.device("cpu"))


def routed_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, means: tuple[torch.Tensor, torch.Tensor],
    k_int: torch.Tensor, k_max: int, heads: int, p: int, two_level_above: int | None,
    stats: dict | None = None, own_first: bool = False,
) -> torch.Tensor:
    """Inference path of ``topk`` and ``adaptive``: route, then tiered attention from token rows.

    q, k, v: (B, C, H, W) with H and W multiples of p (channels-last avoids a copy); means: the
    (B, N, C) region means of q and k; k_int: (B, N) integer k per query region; k_max: its
    maximum, > 0 (passed in: the caller has read it, and a second read is a second host sync on CUDA);
    own_first: rank 0 is each region's own (:func:`own_region_first`). A ``stats`` with a "routes"
    list receives the routing, idx (B, N, k), for benches that ask where it looks.
    Returns (B, C, H, W), channels-last.
    """
    b, _, h, w = q.shape
    idx = route(*means, (h // p, w // p), k_max, two_level_above)  # (B, N, k), best first
    if own_first:
        idx = own_region_first(idx)
    if stats is not None and "routes" in stats:
        stats["routes"].append(idx)
    cpu = q.device.type == "cpu"
    tokens = _cached_token_ids(b, h, w, p) if cpu else region_token_ids(b, h, w, p, q.device)  # (B*N, P)
    rows = region_attention(token_rows(q), token_rows(k), token_rows(v), tokens, idx, k_int, heads, stats)
    return from_token_rows(rows, b, h, w)


def region_attention(
    q_rows: torch.Tensor, k_rows: torch.Tensor, v_rows: torch.Tensor, tokens: torch.Tensor,
    idx: torch.Tensor, k_int: torch.Tensor, heads: int, stats: dict | None = None,
) -> torch.Tensor:
    """:func:`tiered_attention`'s output, through the fused CPU kernel where it runs (:mod:`.native`:
    CPU, fp32 or bf16, eager inference, the kernel built), else through :func:`tiered_attention`."""
    if native.usable(q_rows):
        return native.fused_routed_attention(q_rows, k_rows, v_rows, tokens, idx, k_int, heads, stats)
    return tiered_attention(q_rows, k_rows, v_rows, tokens, idx, k_int, heads, stats=stats)


def static_topk(qc: torch.Tensor, kc: torch.Tensor, k: int) -> torch.Tensor:
    """Exact top-k of pooled scores in fixed shapes: qc, kc (B, N, C) -> (B, N, k) int64, best first.

    One (B, N, N) score matrix (no chunk loop, whose trip count would follow N) and ``k`` columns of
    -inf appended, so ``k`` may exceed N without a shape-dependent branch; ranks past N then point at
    a padding column and are clamped to a valid region id (the budget, at most N, masks them out).
    Memory: N^2 scores per image, so callers bound N by tiling (a 512-px tile at stride 2 and 4x4
    regions has N = 1024).
    """
    b, n, _ = qc.shape
    scores = qc @ kc.transpose(1, 2)  # (B, N, N)
    scores = torch.cat([scores, scores.new_full((b, n, k), float("-inf"))], dim=-1)  # (B, N, N + k)
    return scores.topk(k, dim=-1).indices.clamp(max=n - 1)


def static_routed_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, means: tuple[torch.Tensor, torch.Tensor],
    k_int: torch.Tensor, k_max: int, heads: int, p: int, own_first: bool = False,
) -> torch.Tensor:
    """Fixed-shape inference path of ``topk`` and ``adaptive``: the tiered path's output, no host reads.

    q, k, v: (B, C, H, W) with H and W multiples of p; means: the (B, N, C) region means of q and k;
    k_int: (B, N) integer budget per query region (any float dtype or int64), 0 <= k_int <= min(k_max, N);
    k_max: a Python int, the number of key regions gathered for every query region. Rank r of a query
    region counts iff r < k_int (score bias 0 or a large negative, the soft top-k of training at
    integer k), and a region with k_int = 0 gets zero output, as the tiered path skips it;
    own_first: rank 0 is each region's own (:func:`own_region_first`). Returns (B, C, H, W), channels-last.
    """
    b, c, h, w = q.shape
    idx = static_topk(*means, k_max)  # (B, N, k_max)
    if own_first:
        idx = own_region_first(idx)
    weights, bias = rank_mask_bias(k_int.float(), k_max)  # (B, N, k_max): 1 / 0 and 0 / large negative
    qh, kh, vh = (to_head_regions(t, p, heads) for t in (q, k, v))  # (B, heads, N, P, d)
    out = soft_region_attention(qh, kh, vh, idx, bias)  # (B, heads, N, P, d)
    out = out * weights[:, None, :, :1, None].to(out.dtype)  # rank 0's weight is 0 iff k_int = 0
    return from_head_regions(out, h, w, p)


def soft_region_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, idx: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """Training path: each query region attends to its gathered key regions, with a score bias per region.

    q, k, v: (B, heads, N, P, d) region tokens (:func:`~.common.to_head_regions`); idx: (B, N, K) key
    region ids per query region; bias: (B, N, K) additive score bias per gathered region (the soft
    top-k's log-weights: differentiable, so the gate learns through it). Returns (B, heads, N, P, d).

    One bmm over all B * heads * N query regions, scores (P, K * P) each, never (HW) x (HW). Written
    out rather than as SDPA: with a differentiable mask, PyTorch's CPU SDPA takes its unfused math
    path with layout copies around it, which made this 1.5-1.8x slower per block. Precision follows
    flash attention: q and k are upcast before the gather (the small maps, not the K-fold gathered
    copy), scores and softmax are fp32, and the weights meet v in v's dtype.
    """
    b, heads, n, pp, d = q.shape
    kk = idx.shape[-1]
    m = b * heads * n
    # Row ids into the (B * heads * N, P * d) rows of k and v: image b, head h, key region idx[b, n, j].
    ids = (idx[:, None] + n * torch.arange(b * heads, device=idx.device).view(b, heads, 1, 1)).flatten()
    vg = v.reshape(-1, pp * d).index_select(0, ids).view(m, kk * pp, d)  # (M, K*P, d)
    with torch.autocast(q.device.type, enabled=False):
        kg = k.float().reshape(-1, pp * d).index_select(0, ids).view(m, kk * pp, d)  # (M, K*P, d)
        scores = torch.bmm(q.float().reshape(m, pp, d) * d**-0.5, kg.transpose(1, 2))  # (M, P, K*P)
        scores = scores.view(b, heads, n, pp, kk, pp) + bias.float().view(b, 1, n, 1, kk, 1)
        attn = scores.view(m, pp, kk * pp).softmax(dim=-1)
    return torch.bmm(attn.to(vg.dtype), vg).view(b, heads, n, pp, d)


TRAIN_TIERS = (1, 2, 3, 4, 6, 8, 12, 16)  # gather sizes of the tiered soft path (the largest is always k_top)


def tiered_soft_region_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, idx: torch.Tensor, budget: torch.Tensor,
    caps: tuple[int, ...] = TRAIN_TIERS,
) -> torch.Tensor:
    """The soft training path with compute that follows the budget: regions grouped by how many ranks count.

    Equal to ``soft_region_attention(q, k, v, idx, bias) * weights[..., :1]`` with ``(weights, bias) =
    rank_mask_bias(budget, K)``, values and gradients alike: rank r counts with weight clamp(k - r, 0, 1),
    so a region with continuous budget k only needs its first ceil(k) ranks (at least one, which
    carries the fade and its gradient at k = 0); the ranks beyond add exp(-large) = 0 to its softmax and
    have a constant bias. Each region joins the smallest tier in ``caps`` (plus K) that holds its
    ranks, and each tier gathers only that many key regions: with a mean budget of 2 of K = 8, about a
    third of the fixed-K gathers and scores.

    q, k, v: (B, heads, N, P, d) region tokens; idx: (B, N, K) key region ids, best first; budget:
    (B, N) continuous k in [0, K]. Returns (B, heads, N, P, d).
    """
    b, heads, n, pp, d = q.shape
    k_top = idx.shape[-1]
    weights, bias = rank_mask_bias(budget, k_top)  # (B, N, K)
    need = weights.detach().gt(0).sum(-1).clamp_min(1).flatten()  # (B*N,) ranks that count, >= 1
    tiers = torch.tensor(sorted({c for c in caps if c < k_top} | {k_top}), device=idx.device)
    tier_of = torch.searchsorted(tiers, need)  # index of the smallest cap >= need
    # Region-major rows per head, (heads, B*N, P, d): a tier's query regions and key regions are then
    # one index_select each, and the gathered keys reshape to (heads * M, c * P, d) without a copy.
    to_rows = lambda t: t.transpose(0, 1).reshape(heads, b * n, pp, d)  # noqa: E731
    with torch.autocast(q.device.type, enabled=False):
        qr, kr = to_rows(q.float()) * d**-0.5, to_rows(k.float())
    vr = to_rows(v)
    flat_idx = (idx + n * torch.arange(b, device=idx.device)[:, None, None]).view(b * n, k_top)
    flat_bias = bias.view(b * n, k_top)
    outs, members = [], []
    for t, cap in enumerate(tiers.tolist()):
        mem = (tier_of == t).nonzero().squeeze(1)  # (M,) query regions of this tier
        m = mem.numel()
        if not m:
            continue
        ids = flat_idx.index_select(0, mem)[:, :cap].flatten()  # (M * cap,) key regions, rank order
        vg = vr.index_select(1, ids).view(heads * m, cap * pp, d)  # (heads*M, cap*P, d)
        with torch.autocast(q.device.type, enabled=False):
            qg = qr.index_select(1, mem).view(heads * m, pp, d)  # (heads*M, P, d)
            kg = kr.index_select(1, ids).view(heads * m, cap * pp, d)
            scores = torch.bmm(qg, kg.transpose(1, 2)).view(heads, m, pp, cap, pp)  # (heads, M, P, cap, P)
            scores = scores + flat_bias.index_select(0, mem)[:, :cap].float().view(1, m, 1, cap, 1)
            attn = scores.view(heads * m, pp, cap * pp).softmax(dim=-1)
        outs.append(torch.bmm(attn.to(vg.dtype), vg).view(heads, m, pp, d))
        members.append(mem)
    order = torch.cat(members)  # every region exactly once
    out = torch.cat(outs, dim=1).index_select(1, torch.argsort(order))  # (heads, B*N, P, d), region order
    out = out * weights[..., 0].reshape(1, b * n, 1, 1).to(out.dtype)  # rank 0's weight: the fade as k -> 0
    return out.view(heads, b, n, pp, d).transpose(0, 1)


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
