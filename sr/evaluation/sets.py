"""Evaluation sets: HR folders, their LR partners matched by file name, checked up front, then scored.

:func:`plan_sets` reads every header first, so a bad set (unreadable or too small images, LR files
that are not HR / scale) fails before anything is scored; :func:`score_pairs` then scores a set's
images in order with the protocol of :mod:`.protocol`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..io import ImageError, read_size
from .protocol import UpscaleFn, list_images, load_hr, score_image, score_lr, set_name

# LR file stems carry a scale marker: baby_x2, 0801x2, baby_LRBI_x2, img_001_SRF_2_LR, baby_LR.
_LR_SUFFIX = re.compile(
    r"(?:[_\-.]?(?:lrbi|lrbd|lrdn|lr|bicubic|bic)?[_\-.]?x\d+|[_\-]srf[_\-]\d+(?:[_\-](?:lr|hr))?|[_\-](?:lr|hr))$",
    re.IGNORECASE,
)


class EvaluationError(ValueError):
    """A set that cannot be scored as given (missing folders, unmatched or mis-sized images)."""


@dataclass
class SetPlan:
    name: str
    hr_dir: Path
    lr_dir: Path | None
    pairs: list[tuple[Path, Path | None]]  # (HR file, matched LR file or None: LR made from HR)


@dataclass
class SetResult:
    plan: SetPlan
    rows: list[tuple[str, float, float]] = field(default_factory=list)  # (image, psnr, ssim)
    seconds: float = 0.0
    # the perceptual metrics asked for (sr.evaluation.perceptual), in order, and per image (as rows)
    # each one's score: empty when none were asked for
    metrics: tuple[str, ...] = ()
    perceptual: list[dict[str, float]] = field(default_factory=list)

    @property
    def psnr(self) -> float:
        return float(np.mean([r[1] for r in self.rows]))

    @property
    def ssim(self) -> float:
        return float(np.mean([r[2] for r in self.rows]))

    def mean(self, metric: str) -> float:
        """The set's mean of one perceptual metric over its images, as PSNR's; an image the metric
        cannot score (NaN: lattice's, where HR has too little smooth area) left out; NaN if none."""
        values = np.array([scores[metric] for scores in self.perceptual], dtype=np.float64)
        scored = values[~np.isnan(values)]
        return float(scored.mean()) if scored.size else float("nan")


def set_names(dirs: list[Path]) -> list[str]:
    """One unique, descriptive name per HR folder (used in tables and as --save sub-folders)."""
    names: list[str] = []
    for d in dirs:
        name = base = set_name(d)
        i = 2
        while name in names:
            name, i = f"{base}-{i}", i + 1
        names.append(name)
    return names


def lr_key(stem: str) -> str:
    """A file stem without its LR/HR scale marker, lower-cased: 'baby_LRBI_x2' -> 'baby'."""
    return _LR_SUFFIX.sub("", stem).lower()


def match_lr(hr_files: list[Path], lr_files: list[Path]) -> list[Path]:
    """For each HR file the LR file with the same stem: exact, then the LR stem without its scale
    suffix, then both without (so 'box2.png' pairs with 'box2x2.png', not with 'bo...')."""
    tiers = [
        lambda h, lr: lr.stem == h.stem,
        lambda h, lr: lr_key(lr.stem) == h.stem.lower(),
        lambda h, lr: lr_key(lr.stem) == lr_key(h.stem),
    ]
    out = []
    for h in hr_files:
        for same in tiers:
            found = [lr for lr in lr_files if same(h, lr)]
            if len(found) > 1:
                names = ", ".join(f.name for f in found)
                raise EvaluationError(f"{h.name}: several LR images match ({names})")
            if found:
                out.append(found[0])
                break
        else:
            raise EvaluationError(f"{h.name}: no LR image with a matching name in {lr_files[0].parent}")
    return out


def _image_size(path: Path) -> tuple[int, int]:
    """(width, height) as decoded (EXIF orientation applied), from the header only."""
    try:
        return read_size(path, max_pixels=None)
    except (ImageError, OSError) as e:
        raise EvaluationError(f"{path}: not a readable image ({e})") from None


def _listing(folder: Path, what: str) -> list[Path]:
    if not folder.exists():
        raise EvaluationError(f"{what} folder not found: {folder}")
    if not folder.is_dir():
        raise EvaluationError(f"{what} path is not a folder: {folder}")
    files = list_images(folder)
    if not files:
        raise EvaluationError(f"no images in {what} folder {folder}")
    return files


MIN_SIDE = 11  # SSIM's 11x11 window: the pixels a side left after the scale-wide border crop


def plan_sets(
    hr_dirs: list[str], lr_dirs: list[str] | None, scale: int, min_side: int = MIN_SIDE
) -> list[SetPlan]:
    """Folders -> image pairs. Every header is read up front: unreadable or too-small HR images, and
    LR images that are not exactly HR / scale (after modcrop), fail before anything is scored.
    ``min_side``: the pixels a side an image needs after the border crop (more than SSIM's 11 for
    a perceptual metric with a larger minimum, :func:`sr.evaluation.perceptual.min_side`)."""
    min_side = max(min_side, MIN_SIDE)
    if lr_dirs is not None and len(lr_dirs) != len(hr_dirs):
        raise EvaluationError(
            f"give one --lr folder per --hr folder ({len(hr_dirs)} HR, {len(lr_dirs)} LR)"
        )
    hr_paths = [Path(d) for d in hr_dirs]
    plans = []
    for i, (name, hr_dir) in enumerate(zip(set_names(hr_paths), hr_paths, strict=True)):
        hr_files = _listing(hr_dir, "HR")
        lr_dir = Path(lr_dirs[i]) if lr_dirs is not None else None
        lr_files = match_lr(hr_files, _listing(lr_dir, "LR")) if lr_dir else [None] * len(hr_files)
        for h, lr in zip(hr_files, lr_files, strict=True):
            hw, hh = _image_size(h)
            mw, mh = hw - hw % scale, hh - hh % scale
            if min(mw, mh) - 2 * scale < min_side:
                need = "" if min_side == MIN_SIDE else (
                    f" (the metrics asked for need {min_side} pixels a side after the {scale}-pixel "
                    "border crop)")
                raise EvaluationError(f"{h}: {hw}x{hh} is too small to score at x{scale}{need}")
            if lr is not None:
                lw, lh = _image_size(lr)
                if (mw, mh) != (lw * scale, lh * scale):
                    raise EvaluationError(
                        f"{h.name}: HR {hw}x{hh} (modcropped to {mw}x{mh}) "
                        f"is not {scale} x LR {lw}x{lh} ({lr})"
                    )
        plans.append(SetPlan(name, hr_dir, lr_dir, list(zip(hr_files, lr_files, strict=True))))
    return plans


def score_pairs(
    plan: SetPlan, upscale: UpscaleFn | None, scale: int, channel: str = "y", gray_as_rgb: bool = False
) -> Iterator[tuple[Path, np.ndarray, float, float, np.ndarray]]:
    """(HR path, HR uint8, psnr, ssim, SR uint8) per image of the set, in order; the LR is the
    matched file, else made from the HR (``upscale=None``: bicubic)."""
    for hr_path, lr_path in plan.pairs:
        hr = load_hr(hr_path)
        if lr_path is None:
            p, s, sr = score_image(hr, upscale, scale, channel, gray_as_rgb)
        else:
            p, s, sr = score_lr(hr, load_hr(lr_path), upscale, scale, channel, gray_as_rgb)
        yield hr_path, hr, p, s, sr
