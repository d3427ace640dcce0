"""The attention family behind one constructor: ``make_attention(kind, dim, heads, index, **cfg)``.

Kinds are registered by name (:mod:`.registry`). The built-in ones are the modules imported below,
one explicit list, in the order ``ATTENTION_KINDS`` lists them: a new variant is one new file here
with a ``@register_attention`` builder and one line in that list. A plugin (or a test) registers its
own with that one decorator call, from any module imported before the network is built.
"""

from __future__ import annotations

from torch import nn

from .common import AttentionBranch, attention
from .registry import (
    AttentionVariant,
    attention_k_max,
    attention_kinds,
    get_attention,
    make_attention,
    register_attention,
)

# isort: off
# The built-in kinds. Registration order is ATTENTION_KINDS' order: the design's own family first
# (cheapest first, as tables and benches list them), then the mechanisms it is compared with.
from .dense import DenseAttention
from .window import WindowAttention, shift_mask
from .topk import TopkAttention
from .adaptive import AdaptiveSparseAttention, BudgetGate
from . import cbam, channel, channel_sa, dilated, linear, local, spatial  # noqa: F401  (each registers)
# isort: on

# The kinds this package provides; attention_kinds() also lists variants registered later.
ATTENTION_KINDS = attention_kinds()
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
    blocks = [m for m in model.modules() if isinstance(m, AttentionBranch) and m.has_static_path]
    for m in blocks:
        m.static = path == "static"
    return len(blocks)


__all__ = [
    "ATTENTION_KINDS",
    "ATTENTION_PATHS",
    "AdaptiveSparseAttention",
    "AttentionBranch",
    "AttentionVariant",
    "BudgetGate",
    "DenseAttention",
    "TopkAttention",
    "WindowAttention",
    "attention",
    "attention_k_max",
    "attention_kinds",
    "get_attention",
    "make_attention",
    "register_attention",
    "set_attention_path",
    "shift_mask",
]
