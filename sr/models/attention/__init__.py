"""The attention family behind one constructor: ``make_attention(kind, dim, heads, index, **cfg)``."""

from __future__ import annotations

from torch import nn

from .adaptive import AdaptiveSparseAttention, BudgetGate
from .common import AttentionBranch, attention
from .dense import DenseAttention
from .topk import TopkAttention
from .window import WindowAttention, shift_mask

ATTENTION_KINDS = ("none", "dense", "window", "topk", "adaptive")
ATTENTION_PATHS = ("tiered", "static")


def set_attention_path(model: nn.Module, path: str) -> int:
    """Choose the routed attention's inference path for every block of ``model``.

    'tiered' (the default) groups regions by their integer k, so compute follows the budget: fastest
    on CPU. 'static' gathers k_max regions for every region and masks by the budget: the same output
    in fixed shapes, with no host reads, for GPUs, ``torch.compile`` and ONNX. Returns how many
    blocks it set (0 for a network without routed attention). Training is unaffected.
    """
    if path not in ATTENTION_PATHS:
        raise ValueError(f"unknown attention path {path!r}; choose from {', '.join(ATTENTION_PATHS)}")
    blocks = [m for m in model.modules() if isinstance(m, (AdaptiveSparseAttention, TopkAttention))]
    for m in blocks:
        m.static = path == "static"
    return len(blocks)


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
    "ATTENTION_PATHS",
    "AdaptiveSparseAttention",
    "AttentionBranch",
    "BudgetGate",
    "DenseAttention",
    "TopkAttention",
    "WindowAttention",
    "attention",
    "make_attention",
    "set_attention_path",
    "shift_mask",
]
