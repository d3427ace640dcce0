"""The engine kinds ``Upscaler(model, ...)`` chooses from: one table, read in order.

``Upscaler(model, ...)`` builds the engine of the first kind in :data:`ENGINE_KINDS` whose
``serves(model)`` is true; the family engine, last, serves every model. A plugin adds its own kind with
one call, ``add_engine_kind(EngineKind("mine", lambda model: model == "mine", MyEngine))``: it goes
first, so it can claim models that a built-in kind would otherwise take.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import AUTO_MODEL
from ..descriptor import ModelDescriptor
from .auto import AutoEngine
from .engine import Upscaler
from .family import FamilyEngine

Model = str | Path | ModelDescriptor  # what Upscaler(model=...) takes


@dataclass(frozen=True)
class EngineKind:
    """One kind of engine: ``engine`` (an :class:`~sr.inference.engine.Upscaler` subclass taking
    Upscaler's arguments) is what ``Upscaler(model, ...)`` builds where ``serves(model)`` is true."""

    name: str
    serves: Callable[[Model], bool]
    engine: type[Upscaler]


def is_auto(model: Model) -> bool:
    """``model="auto"``: per input, the photo family for lossy files, the default family for the rest."""
    return model == AUTO_MODEL


def any_model(model: Model) -> bool:
    """Every model: a family name, a full name, a weights file or a descriptor."""
    return True


ENGINE_KINDS: list[EngineKind] = [
    EngineKind("auto", is_auto, AutoEngine),
    EngineKind("family", any_model, FamilyEngine),
]


def add_engine_kind(kind: EngineKind) -> None:
    """Make ``Upscaler(model, ...)`` build ``kind.engine`` for the models ``kind.serves``, ahead of the
    kinds already listed. ValueError for a name already listed or an engine that is not an Upscaler."""
    if not (isinstance(kind.engine, type) and issubclass(kind.engine, Upscaler)):
        raise ValueError(f"engine kind {kind.name!r}: {kind.engine!r} is not an Upscaler subclass")
    if any(k.name == kind.name for k in ENGINE_KINDS):
        raise ValueError(f"engine kind {kind.name!r} is already listed")
    ENGINE_KINDS.insert(0, kind)


def engine_class(model: Model) -> type[Upscaler]:
    """The class ``Upscaler(model, ...)`` builds: the first listed kind that serves ``model``."""
    return next(kind.engine for kind in ENGINE_KINDS if kind.serves(model))
