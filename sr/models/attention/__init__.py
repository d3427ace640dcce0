"""The attention family behind one constructor: ``make_attention(kind, dim, heads, index, **cfg)``."""

from __future__ import annotations

from torch import nn

from .adaptive import AdaptiveSparseAttention, BudgetGate
from .common import AttentionBranch, attention
from .dense import DenseAttention
from .topk import TopkAttention
from .window import WindowAttention, shift_mask

ATTENTION_KINDS = ("none", "dense", "window", "topk", "adaptive")


def make_attention(
    kind: str,
    dim: int,
    heads: int,
    index: int = 0,
    region: int = 4,
    window: int = 8,
    k: int = 4,
    k_min: int = 0,
    k_max: int = 8,
    budget: float = 4.0,
    stride: int = 1,
    detail_prior: float = 0.5,
) -> nn.Module:
    """Build the ``index``-th attention block of a network (window blocks alternate shifts)."""
    if kind == "none":
        return nn.Identity()
    if kind == "dense":
        return DenseAttention(dim, heads, stride=stride)
    if kind == "window":
        return WindowAttention(dim, heads, window=window, shift=index % 2 == 1, stride=stride)
    if kind == "topk":
        return TopkAttention(dim, heads, region=region, k=k, stride=stride)
    if kind == "adaptive":
        return AdaptiveSparseAttention(
            dim, heads, region=region, k_min=k_min, k_max=k_max, budget=budget, stride=stride,
            detail_prior=detail_prior,
        )
    raise ValueError(f"unknown attention {kind!r}; choose from {', '.join(ATTENTION_KINDS)}")


__all__ = [
    "ATTENTION_KINDS",
    "AdaptiveSparseAttention",
    "AttentionBranch",
    "BudgetGate",
    "DenseAttention",
    "TopkAttention",
    "WindowAttention",
    "attention",
    "make_attention",
    "shift_mask",
]
