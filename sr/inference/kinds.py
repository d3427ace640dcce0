"""The built-in engine kinds, the rows of the table ``Upscaler(model, ...)`` chooses from, in order.

``Upscaler(model, ...)`` builds the engine of the first kind in
:data:`~sr.inference.engine.ENGINE_KINDS` whose ``serves(model)`` is true: ``auto`` for
``model="auto"``, then the family engine, last, which serves every model. A plugin adds its own kind
with one call, ``add_engine_kind(EngineKind("mine", lambda model: model == "mine", MyEngine))``: it
goes first, so it can claim models that a built-in kind would otherwise take.

The table lives with :class:`~sr.inference.engine.Upscaler`, which reads it; its rows are listed here,
above the engines they name, so that no engine module imports back the table that names it.
"""

from __future__ import annotations

from .. import AUTO_MODEL
from .auto import AutoEngine
from .engine import ENGINE_KINDS, EngineKind, Model
from .family import FamilyEngine


def is_auto(model: Model) -> bool:
    """``model="auto"``: per input, the photo family for lossy files, the default family for the rest."""
    return model == AUTO_MODEL


def any_model(model: Model) -> bool:
    """Every model: a family name, a full name, a weights file or a descriptor."""
    return True


BUILT_IN_KINDS = (
    EngineKind("auto", is_auto, AutoEngine),
    EngineKind("family", any_model, FamilyEngine),
)
ENGINE_KINDS.extend(BUILT_IN_KINDS)
