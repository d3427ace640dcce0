"""sr's own model families and the rules that tie them together, as data, in one place.

Which family takes a ``denoise`` strength (and is blended with which other family for it), which
takes a ``look`` (blended with which), and what ``auto`` picks between: every part of sr that needs
one of these rules (request validation, the engine's blends, auto's two sides, the service's
catalogue, the CLI's help) reads it here. Torch-free: the CLI checks arguments with it before the
network's libraries load. Models of other architectures (:mod:`sr.external`) are in no family and
take none of these options.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import AUTO_MODEL, DEFAULT_MODEL, NATURAL_MODEL, PHOTO_MODEL
from .shipped import SCALES


@dataclass(frozen=True)
class Family:
    """One shipped family (a weights file per scale: <name>-x2.safetensors, ...)."""

    name: str
    summary: str  # what it is for, as --model's help says it
    # denoise D runs (1 - D) * denoise_base + D * this family, every tensor (None: takes no denoise)
    denoise_base: str | None = None
    # look L runs (1 - L) * this family + L * look_with, every tensor (None: takes no look)
    look_with: str | None = None


@dataclass(frozen=True)
class AutoRule:
    """``auto``: per input file, ``lossy`` for lossy files (JPEG, lossy WebP below
    :data:`sr.NEAR_LOSSLESS_QUALITY`), ``lossless`` for the rest; denoise and look apply to the
    lossy side only (:mod:`sr.inference.model_choice` holds the decision itself)."""

    name: str
    lossless: str
    lossy: str

    @property
    def sides(self) -> tuple[str, str]:
        return self.lossless, self.lossy


FAMILIES: tuple[Family, ...] = (
    Family(DEFAULT_MODEL, "clean input"),
    Family(PHOTO_MODEL, "fine-tuned on blurred, noisy, JPEG-compressed inputs",
           denoise_base=DEFAULT_MODEL, look_with=NATURAL_MODEL),
    Family(NATURAL_MODEL, f"the GAN fine-tune of {PHOTO_MODEL}: natural texture"),
)
AUTO = AutoRule(AUTO_MODEL, lossless=DEFAULT_MODEL, lossy=PHOTO_MODEL)
BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}


def family_of_model(model: object) -> Family | None:
    """The family a model name belongs to: 'photo' and its full names ('photo-x2'); None for auto,
    weights files, other names and anything not a string."""
    if not isinstance(model, str) or "/" in model or "\\" in model:
        return None
    if model in BY_NAME:
        return BY_NAME[model]
    family, sep, scale = model.rpartition("-x")
    return BY_NAME.get(family) if sep and scale in {str(s) for s in SCALES} else None


def is_family(model: object) -> bool:
    """Whether ``model`` names one of sr's families (a full name included) or auto."""
    return model == AUTO.name or family_of_model(model) is not None


def blend_family(model: object) -> Family | None:
    """The family whose blend rules ``model`` follows: its own, or for auto its lossy side's."""
    return BY_NAME[AUTO.lossy] if model == AUTO.name else family_of_model(model)


def takes_denoise(model: object) -> bool:
    """Whether ``model`` (a name given to the engine) accepts a denoise strength."""
    family = blend_family(model)
    return family is not None and family.denoise_base is not None


def takes_look(model: object) -> bool:
    """Whether ``model`` accepts a look."""
    family = blend_family(model)
    return family is not None and family.look_with is not None


# The model names the options apply to, for messages: the families, then auto.
DENOISE_MODELS: tuple[str, ...] = (*(f.name for f in FAMILIES if f.denoise_base), AUTO.name)
LOOK_MODELS: tuple[str, ...] = (*(f.name for f in FAMILIES if f.look_with), AUTO.name)
