"""Inference engine: tiled, thread-safe upscaling of decoded images with shipped or user weights."""

from .engine import (
    ALPHA_MODES,
    DEFAULT_TILE_OVERLAP,
    UpscaleCancelled,
    UpscaleError,
    Upscaler,
    UpscaleResult,
    choose_passes,
    list_models,
)
from .heatmap import budget_heatmap

__all__ = [
    "ALPHA_MODES",
    "DEFAULT_TILE_OVERLAP",
    "UpscaleCancelled",
    "UpscaleError",
    "UpscaleResult",
    "Upscaler",
    "budget_heatmap",
    "choose_passes",
    "list_models",
]
