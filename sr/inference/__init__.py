"""Inference engine: tiled, thread-safe upscaling of decoded images with shipped or user weights.

Importing it imports both implementations ``Upscaler(...)`` builds (family, auto): each registers itself.
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
    "FamilyEngine",
    "LOOK_MODELS",
    "ModelChoice",
    "Plan",
    "UpscaleCancelled",
    "UpscaleError",
    "UpscaleResult",
    "Upscaler",
    "budget_heatmap",
    "choose_passes",
    "list_models",
    "parse_denoise",
    "parse_look",
    "takes_denoise",
    "takes_look",
]
