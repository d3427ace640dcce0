"""Inference engine: tiled, thread-safe upscaling of decoded images with shipped or user weights.

``Upscaler(model, ...)`` builds the engine kind :data:`ENGINE_KINDS` lists for ``model``
(:mod:`~sr.inference.kinds` lists the built-in rows: :class:`AutoEngine` for "auto",
:class:`FamilyEngine` for the rest).
"""

from . import kinds  # noqa: F401  (lists the built-in engine kinds)
from .auto import AutoEngine
from .engine import (
    ALPHA_MODES,
    DEFAULT_TILE_OVERLAP,
    ENGINE_KINDS,
    EngineKind,
    Plan,
    UpscaleCancelled,
    UpscaleError,
    Upscaler,
    UpscaleResult,
    add_engine_kind,
    choose_passes,
    list_models,
)
from .family import FamilyEngine
from .heatmap import budget_heatmap
from .model_choice import (
    DEFAULT_DENOISE,
    DEFAULT_LOOK,
    DENOISE_MODELS,
    LOOK_MODELS,
    ModelChoice,
    parse_denoise,
    parse_look,
    takes_denoise,
    takes_look,
)

__all__ = [
    "ALPHA_MODES",
    "AutoEngine",
    "DEFAULT_DENOISE",
    "DEFAULT_LOOK",
    "DEFAULT_TILE_OVERLAP",
    "DENOISE_MODELS",
    "ENGINE_KINDS",
    "EngineKind",
    "FamilyEngine",
    "LOOK_MODELS",
    "ModelChoice",
    "Plan",
    "UpscaleCancelled",
    "UpscaleError",
    "UpscaleResult",
    "Upscaler",
    "add_engine_kind",
    "budget_heatmap",
    "choose_passes",
    "list_models",
    "parse_denoise",
    "parse_look",
    "takes_denoise",
    "takes_look",
]
