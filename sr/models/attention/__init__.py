"""The attention family behind one constructor: ``make_attention(kind, dim, heads, index, **cfg)``.

Kinds are registered by name (:mod:`.registry`). The built-in ones are imported below in the order
that ``ATTENTION_KINDS`` lists them; any other module of this package is imported after them, so a
new variant is one new file here with a ``@register_attention`` builder (or any module that is
imported before the network is built, e.g. a plugin or a test).
"""

from __future__ import annotations

import importlib
import pkgutil

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
# Registration order is ATTENTION_KINDS' order (cheapest first, as tables and benches list them).
from .dense import DenseAttention
from .window import WindowAttention, shift_mask
from .topk import TopkAttention
from .adaptive import AdaptiveSparseAttention, BudgetGate
# isort: on

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")  # a no-op for those imported above

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
