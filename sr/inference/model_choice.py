"""Which model an input gets: ``--model auto``, ``--denoise`` and ``--look``.

``auto`` picks per input file, from the file's own bytes (:func:`sr.lossy.inspect_compression`):
the photo family (:data:`sr.PHOTO_MODEL`, fine-tuned on blurred, noisy, JPEG-compressed inputs) for
lossy files (JPEG, lossy WebP), the default family (:data:`sr.DEFAULT_MODEL`) for lossless ones and for
nearly lossless lossy files (a JPEG or WebP whose estimated quality is :data:`sr.NEAR_LOSSLESS_QUALITY`
or more).
:func:`auto_scales` is the one rule for where auto exists: both sides (:data:`AUTO_SIDES`) present, at
the scales they share. :class:`sr.inference.auto.AutoEngine` holds one engine for each side, built at
once from metadata (so a missing family is an error up front); their weights load on first use, as
every engine's do.

``denoise`` D in [0, 1] runs the photo family as a network interpolation with the default family of
the same scale: every tensor (1 - D) * default + D * photo (:func:`sr.weights.load_blend`). D = 0 is
the default family's weights exactly, D = 1 (the default) the photo family's. It applies to
``photo`` (and its full names, ``photo-x2``) and to ``auto``'s lossy side only.

``look`` L in [0, 1] does the same with :data:`sr.NATURAL_MODEL` (photo-natural, the GAN fine-tune of
the photo family): photo's weights become (1 - L) * photo + L * photo-natural, every tensor. L = 0
(the default) is photo as trained (fidelity-first; nothing is blended), L = 1 photo-natural's
weights. With D < 1 too: (1 - D) * default + D * ((1 - L) * photo + L * photo-natural). Like
denoise it applies to photo and to auto's lossy side only: auto stays fidelity-first unless asked.

:class:`sr.inference.Upscaler` takes ``model="auto"``, ``denoise=`` and ``look=`` itself, so the CLI, the
service and Python callers share this one rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import AUTO_MODEL, NEAR_LOSSLESS_QUALITY
from ..families import AUTO
from ..lossy import Compression, inspect_compression
from ..request import (
    DEFAULT_DENOISE,
    DEFAULT_LOOK,
    DENOISE_MODELS,
    LOOK_MODELS,
    parse_denoise,
    parse_look,
    takes_denoise,
    takes_look,
)

if TYPE_CHECKING:
    from ..io import DecodedImage

# auto's two sides: (the lossless side, the lossy side), as sr.families states them.
AUTO_SIDES: tuple[str, str] = AUTO.sides


def auto_scales(found: Mapping[str, Sequence[int]]) -> list[int]:
    """The scales auto runs at, given ``found`` ({family: its scales}): those both of its sides
    (:data:`AUTO_SIDES`) have, sorted; [] when either side is missing or they share none."""
    lossless, lossy = AUTO_SIDES
    if lossless not in found or lossy not in found:
        return []
    return sorted(set(found[lossless]) & set(found[lossy]))


# What auto reads to decide: a file path, the file's bytes, or an already known Compression.
Source = str | Path | bytes | Compression


def check_denoise(model: object, denoise: object | None) -> float | None:
    """The strength ``model`` runs with: None for models without one (giving one is a ValueError),
    :data:`DEFAULT_DENOISE` for photo and auto when none is given."""
    if not takes_denoise(model):
        if denoise is not None:
            name = model if isinstance(model, str) else getattr(model, "name", str(model))
            raise ValueError(f"denoise applies only to the models {' and '.join(DENOISE_MODELS)}, "
                             f"not {name!r}")
        return None
    return DEFAULT_DENOISE if denoise is None else parse_denoise(denoise)


def check_look(model: object, look: object | None) -> float | None:
    """The look ``model`` runs with: None for models without one (giving one is a ValueError),
    :data:`DEFAULT_LOOK` (photo as trained) for photo and auto when none is given."""
    if not takes_look(model):
        if look is not None:
            name = model if isinstance(model, str) else getattr(model, "name", str(model))
            raise ValueError(f"look applies only to the models {' and '.join(LOOK_MODELS)}, not {name!r}")
        return None
    return DEFAULT_LOOK if look is None else parse_look(look)


def compression_of(source: Source | None, image: DecodedImage | None = None) -> Compression | None:
    """What the file says about its compression (``source``: its path or bytes), or, without them,
    what the decoded image's format says: JPEG is lossy; anything else (a WebP included, whose kind
    only its bytes tell) is taken as lossless. None when nothing is known."""
    if isinstance(source, Compression):
        return source
    if source is not None:
        from ..io.decode import quiet_pillow  # Pillow's warnings stay quiet here too, as when decoding

        try:
            with quiet_pillow():
                return inspect_compression(source)
        except Exception:  # noqa: BLE001 - unreadable here (the decoder reports why): use the format
            pass
    fmt = getattr(image, "format", None)
    if not fmt:
        return None
    fmt = str(fmt).upper()
    return Compression("JPEG", True) if fmt in ("JPEG", "MPO") else Compression(fmt, False)


@dataclass(frozen=True)
class ModelChoice:
    """The model an input got from ``auto``, and why."""

    model: str                        # the family run: PHOTO_MODEL or DEFAULT_MODEL
    compression: Compression | None   # what decided it (None: nothing known, so lossless)
    denoise: float | None = None      # the photo side's strength; None on the lossless side
    look: float | None = None         # the photo side's look; None on the lossless side

    @property
    def lossy(self) -> bool:
        return self.compression is not None and self.compression.lossy

    def describe(self) -> str:
        """E.g. 'auto: photo (JPEG, quality ~72)', 'auto: photo, look 0.5 (JPEG, quality ~72)',
        'auto: asa-base (PNG, lossless)'."""
        model = self.model
        if self.denoise is not None and self.denoise != DEFAULT_DENOISE:
            model += f", denoise {self.denoise:g}"
        if self.look is not None and self.look != DEFAULT_LOOK:
            model += f", look {self.look:g}"
        why = self.compression.describe() if self.compression is not None else "format unknown"
        if self.lossy and self.model == AUTO.lossless:
            why += ": nearly lossless"
        return f"{AUTO_MODEL}: {model} ({why})"


def nearly_lossless(compression: Compression | None, threshold: int = NEAR_LOSSLESS_QUALITY) -> bool:
    """A JPEG or lossy WebP whose estimated quality is ``threshold`` or more: a careful export of a
    clean image, which the default family upscales better than the photo family."""
    q = None if compression is None else compression.estimated_quality
    return q is not None and q >= threshold


def choose(compression: Compression | None, denoise: float | None = DEFAULT_DENOISE,
           threshold: int = NEAR_LOSSLESS_QUALITY, look: float | None = DEFAULT_LOOK) -> ModelChoice:
    """The rule: lossy -> PHOTO_MODEL (at ``denoise`` and ``look``), except nearly lossless files
    (estimated quality ``threshold`` or more; research.auto_rule tries other thresholds); else
    DEFAULT_MODEL (which neither changes)."""
    if compression is not None and compression.lossy and not nearly_lossless(compression, threshold):
        return ModelChoice(AUTO.lossy, compression, DEFAULT_DENOISE if denoise is None else denoise,
                           DEFAULT_LOOK if look is None else look)
    return ModelChoice(AUTO.lossless, compression)
