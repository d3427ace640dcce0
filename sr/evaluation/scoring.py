"""One planned set scored in order: each image's PSNR/SSIM reported as it comes, the SR images
optionally saved, the set's :class:`~.sets.SetResult` returned."""

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

# called with (image stem, psnr, ssim) after each image is scored
OnImage = Callable[[str, float, float], None]


def save_png(img: np.ndarray, path: Path) -> None:
    """An image (uint8, gray or RGB) as a PNG, written atomically."""
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    write_file(path, buf.getvalue())


def score_set(
    plan: SetPlan, upscale: UpscaleFn | None, scale: int, channel: str = "y", gray_as_rgb: bool = False,
    save_dir: Path | None = None, on_image: OnImage | None = None,
) -> SetResult:
    """Score one set's images in order (``upscale=None``: bicubic); with ``save_dir`` each SR image
    is saved as ``save_dir/<set>/<stem>.png``. An unreadable image or a failed inference is an
    :class:`EvaluationError` naming the image."""
    res = SetResult(plan)
    t0 = time.perf_counter()
    scored = score_pairs(plan, upscale, scale, channel, gray_as_rgb)
    for hr_path, _ in plan.pairs:
        try:
            _, hr, p, s, sr = next(scored)
        except (OSError, ValueError) as e:
            raise EvaluationError(f"{hr_path}: {e}") from None
        except RuntimeError as e:  # out of device memory, mostly
            raise EvaluationError(f"{hr_path}: inference failed ({e}); try --device cpu") from None
        res.rows.append((hr_path.stem, p, s))
        if on_image is not None:
            on_image(hr_path.stem, p, s)
        if save_dir is not None:
            if sr.ndim == 2 and (hr.ndim == 3 or gray_as_rgb):
                # The classic baseline is scored on Y alone; save the viewable RGB bicubic instead.
                hr_rgb = modcrop(hr if hr.ndim == 3 else np.repeat(hr[:, :, None], 3, axis=2), scale)
                sr = imresize(make_lr(hr_rgb, scale), scale)
            save_png(sr, save_dir / plan.name / f"{hr_path.stem}.png")
    res.seconds = time.perf_counter() - t0
    return res
