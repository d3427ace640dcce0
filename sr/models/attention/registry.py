"""Attention variants by name: ``@register_attention("name")`` on a builder, ``make_attention`` to build.

A variant is one file: a module class (usually an :class:`~.common.AttentionBranch`) and a builder
registered under the name that ``NetConfig.attention`` and weights metadata use. Everything else
reads the registry: the network builds through ``make_attention``, ``sr info`` shows the options the
builder takes, the engine asks the built blocks for their ``align`` and the registry for the budget
cap (``k_max``) that a config allows, before any weights are read. (BasicSR's ``ARCH_REGISTRY`` and
timm's ``create_attn`` work the same way.)

A builder is called as ``build(dim, heads, index, **options)``: ``index`` counts the attention blocks
of a network (window attention shifts every other one); its keyword-only parameters are the options
the variant reads from ``NetConfig.attn_options``, and their defaults are its defaults.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from torch import nn

Builder = Callable[..., nn.Module]
B = TypeVar("B", bound=Builder)


@dataclass(frozen=True)
class AttentionVariant:
    """One registered kind: how to build it and what it states about itself."""

    name: str
    build: Builder
    defaults: Mapping[str, Any]  # option -> default, in the builder's order
    summary: tuple[str, ...]  # the options ``sr info`` shows
    budget_option: str | None  # the option that caps key regions per region (None: no budget)

    def k_max(self, options: Mapping[str, Any] | None = None) -> float | None:
        """The most key regions any region may attend to under ``options`` (the top of the budget
        map's scale), or None for a variant without a per-region budget."""
        if self.budget_option is None:
            return None
        return float({**self.defaults, **(options or {})}[self.budget_option])


_VARIANTS: dict[str, AttentionVariant] = {}  # insertion order = registration order


def register_attention(
    name: str, *, summary: tuple[str, ...] | None = None, budget_option: str | None = None
) -> Callable[[B], B]:
    """Register ``build(dim, heads, index, *, option=default, ...)`` as the attention kind ``name``.

    ``summary``: the options ``sr info`` shows (default: all of them). ``budget_option``: the option
    holding the variant's per-region budget cap, for variants whose budget map the engine shows.
    Returns the builder unchanged, so it stays callable (and testable) on its own.
    """

    def decorate(build: B) -> B:
        if name in _VARIANTS:
            # a silent replacement would change what existing weights files build
            raise ValueError(f"attention {name!r} is already registered")
        params = list(inspect.signature(build).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != 3:
            raise TypeError(f"attention builder {name!r} must take (dim, heads, index, *, options...)")
        options = [p for p in params if p.kind is p.KEYWORD_ONLY]
        missing = [p.name for p in options if p.default is p.empty]
        if missing:
            raise TypeError(f"attention builder {name!r}: options need defaults ({', '.join(missing)})")
        defaults = {p.name: p.default for p in options}
        shown = tuple(defaults) if summary is None else summary
        unknown = [o for o in (*shown, *([budget_option] if budget_option else [])) if o not in defaults]
        if unknown:
            raise TypeError(f"attention builder {name!r} has no option(s) {', '.join(unknown)}")
        _VARIANTS[name] = AttentionVariant(name, build, defaults, shown, budget_option)
        return build

    return decorate


def attention_kinds() -> tuple[str, ...]:
    """Every registered kind, in registration order (variants registered at run time included)."""
    return tuple(_VARIANTS)


def get_attention(kind: str) -> AttentionVariant:
    """The registered variant ``kind``, or a ValueError that lists the known ones."""
    try:
        return _VARIANTS[kind]
    except KeyError:
        raise ValueError(f"unknown attention {kind!r}; choose from {', '.join(_VARIANTS)}") from None


def make_attention(kind: str, dim: int, heads: int, index: int = 0, **options: Any) -> nn.Module:
    """Build the ``index``-th attention block of a network from its kind and ``attn_options``.

    One ``attn_options`` dict serves every kind (an ablation swaps the kind and keeps the options),
    so options that another registered kind reads are ignored here; a name no kind reads is a typo
    and raises TypeError.
    """
    variant = get_attention(kind)
    known = {o for v in _VARIANTS.values() for o in v.defaults}
    typos = sorted(o for o in options if o not in known)
    if typos:
        raise TypeError(f"make_attention() got unexpected option(s) {', '.join(typos)}")
    return variant.build(dim, heads, index, **{k: v for k, v in options.items() if k in variant.defaults})


def attention_k_max(kind: str | None, options: Mapping[str, Any] | None = None) -> float | None:
    """The budget cap that a config (kind + ``attn_options``) allows, read without building it:
    None for kinds without a budget and for kinds this install does not know."""
    variant = _VARIANTS.get(kind) if kind else None
    return variant.k_max(options) if variant else None


@register_attention("none")
def _none(dim: int, heads: int, index: int) -> nn.Module:
    """No attention: the conv body alone (the ablation baseline)."""
    return nn.Identity()
