"""What an upscale request may ask for, checked without the engine: torch-free, so that the CLI
can refuse a bad argument before importing torch (an argument error then takes as long as
``sr --version``, not the seconds torch's import takes).

The engine (:mod:`sr.inference`), the CLI and the service take these values from here.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

from . import DEFAULT_MODEL, NATURAL_MODEL, PHOTO_MODEL
from .families import DENOISE_MODELS, LOOK_MODELS, is_family, takes_denoise, takes_look
from .shipped import SCALES

__all__ = [
    "ALPHA_MODES",
    "DEFAULT_DENOISE",
    "DEFAULT_LOOK",
    "DEFAULT_TILE_OVERLAP",
    "DENOISE_MODELS",
    "LOOK_MODELS",
    "MAX_OUTPUT_PIXELS",
    "MAX_OUTSCALE",
    "MAX_SIDE",
    "PRECISIONS",
    "RequestError",
    "UpscaleRequest",
    "parse_denoise",
    "parse_look",
    "parse_tile",
    "same_format",
    "takes_denoise",
    "takes_look",
]

# How alpha is upscaled: bicubic, or by the model as a gray image.
ALPHA_MODES = ("bicubic", "model")
# Default overlap between tiles in input pixels, from the PSNR-vs-overlap sweep of `sr bench upscale
# --sweep-tile` (docs/benchmarks.md): with 16 px a trained model's tiled output is within ~66-68 dB of
# the whole image even for 64-128 px tiles; more overlap gains < 1 dB for up to 1.8x the compute.
DEFAULT_TILE_OVERLAP = 16
# The network's number types (sr.inference.precision says how auto chooses).
PRECISIONS = ("auto", "fp32", "bf16")
# The strength when none is given (the photo model as trained); which models take one, and what they
# are blended with, is sr.families' (DENOISE_MODELS, takes_denoise).
DEFAULT_DENOISE = 1.0
# The look when none is given (0: photo as trained, fidelity-first; 1: NATURAL_MODEL); which models take
# one is sr.families' (LOOK_MODELS, takes_look): auto applies it to its lossy (photo) side only.
DEFAULT_LOOK = 0.0
# The engine's hard stop on output pixels (sr.inference.sizing refuses any plan over it). Defined
# here, torch-free, because the caps below follow from it.
MAX_OUTPUT_PIXELS = 2**28
# Caps on every number of a size, checked before any arithmetic on it: outscale=1e308 made
# ``h * outscale`` infinite and a 401-digit width made ``h * width / w`` overflow, both an
# OverflowError (a 500 that also dropped the keep-alive connection). Neither cap refuses a
# size the engine could make: an output side is at least 1 pixel, so no side exceeds
# MAX_OUTPUT_PIXELS, and every input is at least 1x1 pixel, so no factor over its square root keeps
# the output within it. ``scale`` (a model's factor: 2, 3 or 4) has the same cap.
MAX_SIDE = MAX_OUTPUT_PIXELS
MAX_OUTSCALE = math.isqrt(MAX_OUTPUT_PIXELS)


def parse_tile(value: object) -> int | str:
    """The one reading of a tile setting: "auto" (any case), or a size in input pixels as an int or
    its text, with 0, "off" and "none" for no tiling (the whole image); ValueError otherwise."""
    bad = f"tile must be 'auto', 0 (off) or a size in pixels, got {value!r}"
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        if text in ("off", "none"):
            return 0
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Integral, float)):
        raise ValueError(bad)
    try:
        size = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(bad) from None
    if size < 0 or (isinstance(value, float) and value != size):
        raise ValueError(bad)
    return size


class RequestError(ValueError):
    """A request value that cannot be used. ``field``: the :class:`UpscaleRequest` field at fault
    (the first one named when two conflict); the message names it as the caller's users do."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _parse_unit(value: object, field: str, name: str, ends: str) -> float:
    """A number in [0, 1] from a number or its text; RequestError(field) saying why otherwise."""
    bad = f"{name} must be a number from 0 to 1"
    if isinstance(value, bool):
        raise RequestError(field, f"{bad}, got {value!r}")
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise RequestError(field, f"{bad}, got {_shown(value)}") from None
    elif isinstance(value, numbers.Integral) and not 0 <= value <= 1:
        # float() of a 400-digit int raises OverflowError: out of range whatever its size
        raise RequestError(field, f"{bad} ({ends}), got {_shown(value)}")
    elif isinstance(value, (int, float)):
        number = float(value)
    else:
        raise RequestError(field, f"{bad}, got {_shown(value)}")
    if not math.isfinite(number) or not 0 <= number <= 1:
        raise RequestError(field, f"{bad} ({ends}), got {_shown(value)}")
    return number


def parse_denoise(value: object, name: str = "denoise") -> float:
    """A denoise strength in [0, 1] from a number or its text; RequestError saying why otherwise
    (``name``: what the caller's users call the field)."""
    return _parse_unit(value, "denoise", name, f"0 = {DEFAULT_MODEL}, 1 = {PHOTO_MODEL}")


def parse_look(value: object, name: str = "look") -> float:
    """A look in [0, 1] (0 = photo as trained, 1 = photo-natural) from a number or its text;
    RequestError saying why otherwise (``name``: what the caller's users call the field)."""
    return _parse_unit(value, "look", name, f"0 = {PHOTO_MODEL}, 1 = {NATURAL_MODEL}")


def check_output_size(outscale: object, width: object, height: object,
                      name: Callable[[str], str] = str) -> None:
    """The one check of how an output size is asked for (``outscale``, or ``width`` and/or ``height``):
    :class:`RequestError` naming the field (as ``name`` spells it) and why. The request's
    :meth:`~UpscaleRequest.validate` and the engine's size plan (a Python caller's values) both use it."""
    if outscale is not None and (width is not None or height is not None):
        raise RequestError("outscale", f"give either {name('outscale')} or "
                                       f"{name('width')}/{name('height')}, not both")
    if outscale is not None and (
        isinstance(outscale, bool) or not isinstance(outscale, (int, float))
        or not (math.isfinite(outscale) and outscale > 0)
    ):
        raise RequestError("outscale", f"{name('outscale')} must be a number > 0, got {_shown(outscale)}")
    if outscale is not None and outscale > MAX_OUTSCALE:
        raise RequestError("outscale", f"{name('outscale')} must be at most {MAX_OUTSCALE} (no larger "
                                       f"factor stays within {MAX_OUTPUT_PIXELS} output pixels), "
                                       f"got {_shown(outscale)}")
    for field, v in (("width", width), ("height", height)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1):
            raise RequestError(field, f"{name(field)} must be a positive number of pixels, got {_shown(v)}")
        if v is not None and v > MAX_SIDE:
            raise RequestError(field, f"{name(field)} must be at most {MAX_SIDE} pixels (the output "
                                      f"limit), got {_shown(v)}")


def _shown(value: object, limit: int = 40) -> str:
    """``repr(value)``, shortened past ``limit`` characters: a 400-digit number stays a one-line error."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 13]}... ({len(text)} characters)"


@dataclass(frozen=True)
class UpscaleRequest:
    """What one upscale asks for, the same for the CLI, batch and the service.

    Size: ``scale`` (a model factor), or ``outscale`` (any factor), or ``width`` and/or ``height``
    (pixels; one alone keeps the aspect ratio). ``format``: an output format's name or "same".
    :meth:`validate` is the one check of these values (ValueError naming the field); the engine
    still refuses what only it can know (a scale the model lacks, an output over its limit).
    """

    scale: int | None = None
    outscale: float | None = None
    width: int | None = None
    height: int | None = None
    model: str = DEFAULT_MODEL
    denoise: float | None = None
    look: float | None = None
    pre: str | None = None  # a 1x restoration model run before the upscaling one (a file; a service name)
    tta: bool = False
    alpha_mode: str = "bicubic"
    format: str = "png"
    quality: int = 95
    budget_map: bool = False
    precision: str = "auto"

    def validate(self, name: Callable[[str], str] = str) -> UpscaleRequest:
        """This request when every value is usable; :class:`RequestError` saying which one is not,
        and why. ``name``: how the caller's users call a field (the CLI passes ``--outscale`` for
        ``outscale``; the service's form fields are the field names), so that the CLI and the
        service refuse the same request with the same sentence."""
        if self.scale is not None and (
            isinstance(self.scale, bool) or not isinstance(self.scale, numbers.Integral) or self.scale < 1
        ):
            raise RequestError("scale", f"{name('scale')} must be a positive integer, "
                                        f"got {_shown(self.scale)}")
        if self.scale is not None and self.scale > MAX_OUTSCALE:
            raise RequestError("scale", f"{name('scale')} must be at most {MAX_OUTSCALE}, "
                                        f"got {_shown(self.scale)}")
        if self.scale is not None and self.scale not in SCALES and is_family(self.model):
            # sr's families have files for these scales only; a model file states its own (engine)
            raise RequestError("scale", f"{name('scale')} must be one of {', '.join(map(str, SCALES))} for "
                                        f"{self.model}, got {_shown(self.scale)}")
        check_output_size(self.outscale, self.width, self.height, name)
        if not self._known_format():
            raise RequestError("format", f"{name('format')} must be an output format or 'same', "
                                         f"got {self.format!r}")
        if isinstance(self.quality, bool) or not isinstance(self.quality, numbers.Integral) \
                or not 1 <= self.quality <= 100:
            raise RequestError("quality", f"{name('quality')} must be 1-100, got {_shown(self.quality)}")
        if self.alpha_mode not in ALPHA_MODES:
            raise RequestError("alpha_mode", f"{name('alpha_mode')} must be one of "
                                             f"{', '.join(ALPHA_MODES)}, got {self.alpha_mode!r}")
        if self.precision not in PRECISIONS:
            raise RequestError("precision", f"{name('precision')} must be one of "
                                            f"{', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.denoise is not None:
            parse_denoise(self.denoise, name("denoise"))
            if not takes_denoise(self.model):
                raise RequestError("denoise", f"{name('denoise')} applies only to the models "
                                              f"{' and '.join(DENOISE_MODELS)}, not {self.model!r}")
        if self.look is not None:
            parse_look(self.look, name("look"))
            if not takes_look(self.model):
                raise RequestError("look", f"{name('look')} applies only to the models "
                                           f"{' and '.join(LOOK_MODELS)}, not {self.model!r}")
        return self

    def _known_format(self) -> bool:
        # sr.io's format table only (no Pillow): the CLI checks arguments before heavy imports.
        from .io.formats import writable_format_for

        return self.format == "same" or (isinstance(self.format, str)
                                         and writable_format_for(self.format) is not None)

    def output_suffix(self, model_scale: int) -> str:
        """What the output's name adds to the input's stem: ``_x2``, ``_x1.5``, ``_w800``, ``_h600``,
        ``_800x600``, or ``_budget`` for a budget map. Decided by the request, not by the result, so
        that batch names its outputs before reading an input; ``model_scale``: the scale a request
        without one gets (the model's smallest)."""
        if self.budget_map:
            return "_budget"
        if self.outscale is not None:
            return f"_x{self.outscale:g}"
        if self.width is not None and self.height is not None:
            return f"_{self.width}x{self.height}"
        if self.width is not None:
            return f"_w{self.width}"
        if self.height is not None:
            return f"_h{self.height}"
        return f"_x{self.scale or model_scale}"


def same_format(source: str | None) -> str:
    """``format="same"``: the output format's user name for a source format (a decoded format's
    name or a file suffix such as ".tif"): the source's when sr.io writes it, else png. The CLI
    (by suffix, before reading) and the service (by decoded format) both ask here."""
    # sr.io imported here: it pulls in Pillow and numpy, which the CLI's argument checks skip.
    from .io import format_for

    row = format_for(source) if source else None
    return row.user_name if row is not None and row.writable else "png"
