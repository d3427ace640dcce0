"""One planned set scored in order: each image's PSNR/SSIM (and any perceptual metrics asked for,
:mod:`.perceptual`) reported as it comes, the SR images optionally saved, the set's
:class:`~.sets.SetResult` returned."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from ..resize import imresize, modcrop
from .protocol import UpscaleFn, make_lr
from .results import write_file
from .sets import EvaluationError, SetPlan, SetResult, score_pairs

# called with (image stem, psnr, ssim) after each image is scored, and with each perceptual metric
# asked for as a keyword (haarpsi=..., cvvdp=...): none when none were asked for
OnImage = Callable[..., None]


def save_png(img: np.ndarray, path: Path) -> None:
    """An image (uint8, gray or RGB) as a PNG, written atomically."""
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    write_file(path, buf.getvalue())


def viewable_sr(sr: np.ndarray, hr: np.ndarray, scale: int, gray_as_rgb: bool = False) -> np.ndarray:
    """The SR image as a picture, what ``--save`` writes and the perceptual metrics see: ``sr`` itself,
    except for the classic bicubic baseline, which is scored on Y alone (a 2-D ``sr`` of a colour or
    ``gray_as_rgb`` HR); then the RGB bicubic of the same MATLAB-bicubic LR."""
    if sr.ndim == 2 and (hr.ndim == 3 or gray_as_rgb):
        hr_rgb = modcrop(hr if hr.ndim == 3 else np.repeat(hr[:, :, None], 3, axis=2), scale)
        return imresize(make_lr(hr_rgb, scale), scale)
    return sr


def perceptual_crop(hr: np.ndarray, sr: np.ndarray, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(HR, SR) as the perceptual metrics score them: HR cropped to SR's size (its modcrop), then
    ``scale`` pixels cut from every border of both, as PSNR's crop."""
    h, w = sr.shape[:2]
    return hr[:h, :w][scale : h - scale, scale : w - scale], sr[scale : h - scale, scale : w - scale]


def score_set(
    plan: SetPlan, upscale: UpscaleFn | None, scale: int, channel: str = "y", gray_as_rgb: bool = False,
    save_dir: Path | None = None, on_image: OnImage | None = None, metrics: tuple[str, ...] = (),
) -> SetResult:
    """Score one set's images in order (``upscale=None``: bicubic); with ``save_dir`` each SR image
    is saved as ``save_dir/<set>/<stem>.png``; ``metrics``: perceptual metrics of
    :mod:`.perceptual` (checked available by the caller) scored on each image besides PSNR/SSIM.
    An unreadable image or a failed inference is an :class:`EvaluationError` naming the image."""
    res = SetResult(plan, metrics=tuple(metrics))
    t0 = time.perf_counter()
    scored = score_pairs(plan, upscale, scale, channel, gray_as_rgb)
    for hr_path, _ in plan.pairs:
        try:
            _, hr, p, s, sr = next(scored)
        except (OSError, ValueError) as e:
            raise EvaluationError(f"{hr_path}: {e}") from None
        except RuntimeError as e:  # out of device memory, mostly
            raise EvaluationError(f"{hr_path}: inference failed ({e}); try --device cpu") from None
        view = viewable_sr(sr, hr, scale, gray_as_rgb) if metrics or save_dir is not None else sr
        extra: dict[str, float] = {}
        if metrics:
            from .perceptual import score_perceptual

            try:
                extra = score_perceptual(res.metrics, *perceptual_crop(hr, view, scale), scale)
            except (ValueError, RuntimeError) as e:  # HaarPSI's 16-pixel minimum, a missing package
                raise EvaluationError(f"{hr_path}: perceptual metrics failed ({e})") from None
            res.perceptual.append(extra)
        res.rows.append((hr_path.stem, p, s))
        if on_image is not None:
            on_image(hr_path.stem, p, s, **extra)
        if save_dir is not None:
            save_png(view, save_dir / plan.name / f"{hr_path.stem}.png")
    res.seconds = time.perf_counter() - t0
    return res
