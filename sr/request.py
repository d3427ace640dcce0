"""What an upscale request may ask for, checked without the engine: torch-free, so that the CLI
can refuse a bad argument before importing torch (an argument error then takes as long as
``sr --version``, not the seconds torch's import takes).

The engine (:mod:`sr.inference`), the CLI and the service take these values from here.
"""

from __future__ import annotations

import math

from . import AUTO_MODEL, DEFAULT_MODEL, PHOTO_MODEL

__all__ = [
    "ALPHA_MODES",
    "DEFAULT_DENOISE",
    "DEFAULT_TILE_OVERLAP",
    "DENOISE_MODELS",
    "PRECISIONS",
    "parse_denoise",
]

# How alpha is upscaled: bicubic, or by the model as a gray image.
ALPHA_MODES = ("bicubic", "model")
# Default overlap between tiles in input pixels, from the PSNR-vs-overlap sweep of `sr bench upscale
# --sweep-tile` (docs/benchmarks.md): with 16 px a trained model's tiled output is within ~66-68 dB of
# the whole image even for 64-128 px tiles; more overlap gains < 1 dB for up to 1.8x the compute.
DEFAULT_TILE_OVERLAP = 16
# The network's number types (sr.inference.precision says how auto chooses).
PRECISIONS = ("auto", "fp32", "bf16")
# Models that take a denoise strength, and the strength when none is given (the photo model as trained).
DENOISE_MODELS = (PHOTO_MODEL, AUTO_MODEL)
DEFAULT_DENOISE = 1.0


def parse_denoise(value: object) -> float:
    """A denoise strength in [0, 1] from a number or its text; ValueError saying why otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"denoise must be a number from 0 to 1, got {value!r}")
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ValueError(f"denoise must be a number from 0 to 1, got {value!r}") from None
    elif isinstance(value, (int, float)):
        number = float(value)
    else:
        raise ValueError(f"denoise must be a number from 0 to 1, got {value!r}")
    if not math.isfinite(number) or not 0 <= number <= 1:
        raise ValueError(f"denoise must be a number from 0 to 1 (0 = {DEFAULT_MODEL}, 1 = {PHOTO_MODEL}), "
                         f"got {value!r}")
    return number
