"""Adaptive sparse attention (ASA): pooled coarse scoring, top-k regions, per-region gated budget.

A small gate reads each p x p region's local statistics (mean and variance of the features) and
decides how many key regions k it attends to, between k_min and k_max, normalised so the mean over
the image is the target budget: flat regions get little (k = 0 skips attention), edges and texture
more. Training uses a soft top-k over ranks (differentiable in k); inference uses hard top-k,
grouping regions by their k so that compute follows the budget, or, with ``static = True``, the same
hard top-k in fixed shapes (k_max regions gathered everywhere, the budget as a mask): no host reads,
for GPUs, ``torch.compile`` and ONNX export.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .common import AttentionBranch, from_head_regions, pad_to_multiple, to_head_regions
from .registry import register_attention
from .routing import (
    own_region_first,
    pooled_topk,
    routed_attention,
    static_routed_attention,
    tiered_soft_region_attention,
)


class BudgetGate(nn.Module):
    """Per-region complexity score: (B, C, H, W) -> (B, 1, H/p, W/p), >= 0.

    score = softplus(net(mean, var)) * detail^prior, with detail the region's mean channel variance.
    The detail prior makes the allocation follow image content from the first step (a flat region's
    score ~ 0, so its k ~ 0 and attention is skipped there); the learned net refines it. Without the
    prior a fresh gate is near-uniform and learns slowly: the only signal reaching it is the
    fractional rank's weight in the soft top-k.
    """

    def __init__(self, dim: int, region: int, hidden: int = 16, detail_prior: float = 0.5) -> None:
        super().__init__()
        self.region, self.detail_prior = region, detail_prior
        self.net = nn.Sequential(
            nn.Conv2d(2 * dim, hidden, 1), nn.GELU(), nn.Conv2d(hidden, 1, 3, padding=1)
        )
        # Start near-uniform (every region ~ the target budget) but not exactly: a perfectly flat
        # score has zero gradient through the mean normalisation.
        nn.init.normal_(self.net[-1].weight, std=0.02)
        nn.init.constant_(self.net[-1].bias, 0.5413)  # softplus(0.5413) = 1

    def forward(self, x: torch.Tensor, mean: torch.Tensor | None = None) -> torch.Tensor:
        """``mean``: x's region means, ``F.avg_pool2d(x.float(), region)``, where the caller has them."""
        x = x.float()  # statistics in fp32: E[x^2] - E[x]^2 cancels badly in half precision
        if mean is None:
            mean = F.avg_pool2d(x, self.region)  # (B, C, Hr, Wr)
        var = (F.avg_pool2d(x * x, self.region) - mean * mean).clamp_min(0)
        stats = torch.cat([mean, var], 1).to(self.net[0].weight.dtype)  # a no-op for fp32 weights
        score = F.softplus(self.net(stats).float())  # (B, 1, Hr, Wr), > 0
        if self.detail_prior:
            score = score * var.mean(1, keepdim=True).add(1e-6).pow(self.detail_prior)
        return score


class AdaptiveSparseAttention(AttentionBranch):
    has_static_path = True

    def __init__(
        self,
        dim: int,
        heads: int,
        region: int = 4,
        k_min: int = 0,
        k_max: int = 8,
        budget: float = 4.0,
        positional: bool = True,
        stride: int = 1,
        detail_prior: float = 0.5,
        two_level_above: int | None = 512,
        own_first: bool = False,
    ) -> None:
        super().__init__(dim, heads, positional, stride)
        self.two_level_above = two_level_above  # inference: coarse-to-fine routing beyond this many regions
        self.own_first = own_first  # rank 0 = the region itself, then the routed ones (own_region_first)
        if not 0 <= k_min <= budget <= k_max:
            raise ValueError(f"need 0 <= k_min <= budget <= k_max, got {k_min}, {budget}, {k_max}")
        self.region, self.k_min, self.k_max, self.budget = region, k_min, k_max, float(budget)
        self.gate = BudgetGate(dim, region, detail_prior=detail_prior)
        self.static = False  # inference path: tiered (False) or fixed-shape (True); see set_attention_path

    @property
    def align(self) -> int:
        return self.stride * self.region  # regions tile the stride-pooled map from its top left

    def set_budget(self, budget: float) -> None:
        """Retarget the mean budget (0 = attention skipped everywhere); k_min follows it down."""
        self.budget, self.k_min = float(budget), min(self.k_min, int(budget))

    def allocate(self, x: torch.Tensor, n: int, mean: torch.Tensor | None = None) -> torch.Tensor:
        """Continuous per-region k: (B, 1, Hr, Wr) in [k_min, min(k_max, N)], mean ~ budget.

        ``mean``: x's fp32 region means where the caller has them (inference shares them with routing)."""
        # sym_min: with symbolic sizes (torch.compile, ONNX export) no guard on N >= k_max
        k_max = torch.sym_min(self.k_max, n)
        budget = torch.sym_min(self.budget, k_max)
        score = self.gate(x, mean)
        k = budget * score / score.mean(dim=(2, 3), keepdim=True).clamp_min(1e-20)
        # Water-filling: what regions lose to the k_max cap goes back to the others, keeping the mean.
        for _ in range(2):
            k = k.clamp(max=k_max)
            k = k * (budget / k.mean(dim=(2, 3), keepdim=True).clamp_min(1e-20))
        return k.clamp(torch.sym_min(self.k_min, k_max), k_max)

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        p = self.region
        if self.training and torch.is_grad_enabled():
            out, k_map = self._attend_train(q, k, v, x)
        elif self.static:
            out, k_map = self._attend_static(q, k, v, x)
        else:
            out, k_map = self._attend_infer(q, k, v, x, aux)
        if aux is not None:
            aux.setdefault("budget_maps", []).append(
                F.interpolate(k_map, scale_factor=p, mode="nearest")[:, :, :h, :w]
            )
            aux["budget_loss"] = aux.get("budget_loss", 0.0) + (k_map.mean() / self.budget - 1) ** 2
        out = out[:, :, :h, :w]
        # A fresh channels-last copy: the crop's strides depend on the padding, and the layout checks
        # of the ops after it would guard on them, i.e. recompile per size class under torch.compile.
        return out.clone(memory_format=torch.channels_last) if self.static and not self.training else out

    def _attend_train(self, q, k, v, x):
        """Soft path on (B, heads, N, P, d) region tokens; returns (padded output map, continuous k map)."""
        p = self.region
        q, k, v, xp = (pad_to_multiple(t, p)[0] for t in (q, k, v, x))
        hp, wp = q.shape[-2:]
        n = (hp // p) * (wp // p)
        k_map = self.allocate(xp, n)  # (B, 1, Hr, Wr)
        k_top = min(self.k_max, n)
        idx = pooled_topk(*self.pooled_qk(xp, p), k_top)  # (B, N, k_top), best first; as inference routes
        if self.own_first:
            idx = own_region_first(idx)
        # Rank r counts with weight clamp(k - r, 0, 1): a log-weight score bias inside, a fade outside
        # (k -> 0 fades the whole branch out, so a budget of 0 means "no attention here"). Regions are
        # tiered by ceil(k), so the gathers and scores follow the budget as at inference.
        qh, kh, vh = (to_head_regions(t, p, self.heads) for t in (q, k, v))  # (B, heads, N, P, d)
        out = tiered_soft_region_attention(qh, kh, vh, idx, k_map.flatten(1))  # (B, heads, N, P, d)
        return from_head_regions(out, hp, wp, p), k_map

    def _attend_static(self, q, k, v, x):
        """Fixed-shape hard path (:func:`static_routed_attention`); returns (padded map, integer k map)."""
        p = self.region
        q, k, v, xp = (pad_to_multiple(t, p, always=True)[0] for t in (q, k, v, x))
        n = (q.shape[-2] // p) * (q.shape[-1] // p)
        xf = xp.float()  # one fp32 copy and one pooling serve the gate's statistics and the routing
        pooled = F.avg_pool2d(xf, p)
        k_map = (self.allocate(xf, n, pooled) + 0.5).floor()  # the tiered path's integer budgets
        out = static_routed_attention(q, k, v, self.pooled_qk(xf, p, pooled), k_map.flatten(1), self.k_max,
                                      self.heads, p, own_first=self.own_first)
        return out, k_map

    def _attend_infer(self, q, k, v, x, aux):
        """Hard path: integer k per region, tiers gathered from token rows; returns (map, k map)."""
        p = self.region
        # Padding each tensor separately equals padding their concatenation, without the copy.
        q, k, v, xp = (pad_to_multiple(t, p)[0] for t in (q, k, v, x))
        n = (q.shape[-2] // p) * (q.shape[-1] // p)
        xf = xp.float()  # one fp32 copy and one pooling serve the gate's statistics and the routing
        pooled = F.avg_pool2d(xf, p)
        k_map = (self.allocate(xf, n, pooled) + 0.5).floor()  # hard integer budgets, (B, 1, Hr, Wr)
        record = aux is not None and aux.get("record_routes", False)
        stats: dict = {"gathered": 0, **({"routes": []} if record else {})}
        k_max = int(k_map.max())
        if k_max == 0:  # every region skips attention
            out = q.new_zeros(q.shape)
        else:
            out = routed_attention(
                q, k, v, self.pooled_qk(xf, p, pooled), k_map.flatten(1).long(), k_max, self.heads, p,
                self.two_level_above, stats, own_first=self.own_first,
            )
        if aux is not None:
            aux.setdefault("gathered_regions", []).append(stats["gathered"])
        if record:  # where each region's kept ranks point: (idx (B, N, k), k (B, N), region grid)
            routes = stats["routes"][0] if stats["routes"] else None
            grid = (q.shape[-2] // p, q.shape[-1] // p)
            aux.setdefault("routes", []).append((routes, k_map.flatten(1).long(), grid))
        return out, k_map


# sr info leaves detail_prior out: it shapes training's allocation, not the routing that is run
@register_attention(
    "adaptive", summary=("region", "k_min", "k_max", "budget", "stride", "own_first"), budget_option="k_max"
)
def build_adaptive(
    dim: int, heads: int, index: int, *, region: int = 4, k_min: int = 0, k_max: int = 8, budget: float = 4.0,
    stride: int = 1, detail_prior: float = 0.5, own_first: bool = False,
) -> AdaptiveSparseAttention:
    return AdaptiveSparseAttention(
        dim, heads, region=region, k_min=k_min, k_max=k_max, budget=budget, stride=stride,
        detail_prior=detail_prior, own_first=own_first,
    )
