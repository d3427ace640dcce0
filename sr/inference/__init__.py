"""Inference engine: tiled, thread-safe upscaling of decoded images with shipped or user weights.

``Upscaler(model, ...)`` builds the engine kind :data:`~sr.inference.kinds.ENGINE_KINDS` lists for
``model`` (:class:`AutoEngine` for "auto", :class:`FamilyEngine` for the rest).
"""

from .auto import AutoEngine
from .engine import (
    ALPHA_MODES,
    DEFAULT_TILE_OVERLAP,
    Plan,
    UpscaleCancelled,
    UpscaleError,
    Upscaler,
    UpscaleResult,
    choose_passes,
    list_models,
)
from .family import FamilyEngine
from .heatmap import budget_heatmap
from .kinds import ENGINE_KINDS, EngineKind, add_engine_kind
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
