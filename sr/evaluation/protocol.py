"""The evaluation protocol: HR -> modcrop -> MATLAB-bicubic LR -> model -> PSNR/SSIM on Y.

Used by ``sr eval`` and by validation during training, so both report the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..inference.ensemble import self_ensemble
from ..io import listed_suffixes, read_array
from ..metrics import psnr, rgb_to_y, ssim
from ..resize import imresize, modcrop

# Folder names that say nothing about the set (benchmark/Set5/HR): the parent names the set instead.
GENERIC_DIR_NAMES = {"hr", "gt", "gtmod12", "original", "originals", "images", "image", "test", "val"}

# An upscaler maps an (H, W, 3) uint8 LR image to an (sH, sW, 3) float/uint8 image in [0, 255].
UpscaleFn = Callable[[np.ndarray], np.ndarray]


@dataclass
class ImageScore:
    name: str
    psnr: float
    ssim: float


def set_name(folder: str | Path) -> str:
    """The name an HR folder's results go by, in ``sr eval`` tables and in training logs alike:
    its own name, or its parent's when its own is generic ('DIV2K/HR' -> 'DIV2K', '.' -> the cwd's)."""
    path = Path(folder).resolve()
    return path.parent.name if path.name.lower() in GENERIC_DIR_NAMES and path.parent.name else path.name


def list_images(folder: str | Path) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"not a folder: {folder}")
    suffixes = listed_suffixes()
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in suffixes)


def load_hr(path: str | Path) -> np.ndarray:
    """HR (or LR) image as uint8 (H, W) for gray files or (H, W, 3) for colour (alpha dropped),
    decoded as training and inference decode it (:func:`sr.io.read_array`: 16-bit scaled, EXIF
    orientation applied)."""
    return read_array(path)


def make_lr(hr: np.ndarray, scale: int) -> np.ndarray:
    """MATLAB-bicubic LR of an already modcropped uint8 HR, stored as uint8 like an LR PNG."""
    return imresize(hr, 1 / scale)


def load_rgb_pair(path: Path, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(HR, LR) uint8 RGB for running a model on an HR file: modcropped, gray replicated to RGB, LR
    made as :func:`score_image` makes it (benches that time or probe the network, not score gray)."""
    hr = modcrop(load_hr(path), scale)
    if hr.ndim == 2:
        hr = np.repeat(hr[:, :, None], 3, axis=2)
    return hr, make_lr(hr, scale)


def bicubic_y_baseline(hr: np.ndarray, scale: int) -> np.ndarray:
    """The published bicubic baseline, computed the classic (SRCNN/VDSR script) way: on the uint8
    Y channel of MATLAB's rgb2ycbcr, down and up in float, then rounded. Returns Y (H, W)."""
    y = np.round(rgb_to_y(hr)) if hr.ndim == 3 else hr.astype(np.float64)
    lr = imresize(y / 255.0, 1 / scale)
    return np.clip(np.round(imresize(lr, scale) * 255.0), 0, 255)


def score_image(
    hr: np.ndarray, upscale: UpscaleFn | None, scale: int, channel: str = "y", gray_as_rgb: bool = False
) -> tuple[float, float, np.ndarray]:
    """Score one HR image; ``upscale=None`` is the bicubic baseline. Returns (psnr, ssim, sr uint8)."""
    hr = modcrop(hr, scale)
    if hr.ndim == 2 and gray_as_rgb:
        hr = np.repeat(hr[:, :, None], 3, axis=2)
    if upscale is None and channel == "y":
        sr = bicubic_y_baseline(hr, scale)
        ref = np.round(rgb_to_y(hr)) if hr.ndim == 3 else hr
        return psnr(sr, ref, scale), ssim(sr, ref, scale), sr.astype(np.uint8)
    return score_lr(hr, make_lr(hr, scale), upscale, scale, channel, gray_as_rgb)


def score_lr(
    hr: np.ndarray,
    lr: np.ndarray,
    upscale: UpscaleFn | None,
    scale: int,
    channel: str = "y",
    gray_as_rgb: bool = False,
) -> tuple[float, float, np.ndarray]:
    """Score the upscaled ``lr`` against ``hr`` (uint8 images; ``upscale=None``: RGB bicubic).

    ``hr`` is modcropped and must then be exactly ``scale`` times ``lr``. Returns (psnr, ssim, sr uint8).
    """
    hr = modcrop(hr, scale)
    if hr.ndim == 2 and gray_as_rgb:
        hr = np.repeat(hr[:, :, None], 3, axis=2)
    if hr.shape[:2] != (lr.shape[0] * scale, lr.shape[1] * scale):
        raise ValueError(
            f"HR {hr.shape[1]}x{hr.shape[0]} (after modcrop) is not {scale} x LR {lr.shape[1]}x{lr.shape[0]}"
        )
    lr_rgb = np.repeat(lr[:, :, None], 3, axis=2) if lr.ndim == 2 else lr[:, :, :3]
    sr = imresize(lr_rgb, scale) if upscale is None else upscale(lr_rgb)
    sr = np.clip(np.round(np.asarray(sr, dtype=np.float64)), 0, 255)
    if sr.shape != hr.shape[:2] + (3,):
        raise ValueError(f"upscaler returned shape {sr.shape}, expected {hr.shape[:2] + (3,)}")
    if hr.ndim == 2:
        sr = sr.mean(axis=2).round()  # gray in, gray scored: the model's channels averaged back
    return psnr(sr, hr, scale, channel), ssim(sr, hr, scale, channel), sr.astype(np.uint8)


def evaluate_folder(
    hr_dir: str | Path,
    scale: int,
    upscale: UpscaleFn | None,
    channel: str = "y",
    gray_as_rgb: bool = False,
) -> list[ImageScore]:
    scores = []
    for path in list_images(hr_dir):
        p, s, _ = score_image(load_hr(path), upscale, scale, channel, gray_as_rgb)
        scores.append(ImageScore(path.stem, p, s))
    return scores


@contextmanager
def exact_fp32(device: torch.device) -> Iterator[None]:
    """Full fp32 convolutions on CUDA for the duration: cuDNN's default TF32 keeps a 10-bit
    mantissa, which moves PSNR in the third decimal. cuDNN's autotuner is off too: evaluation
    images come in many sizes, and tuning every conv for each would cost more than it saves.
    Elsewhere a no-op."""
    if device.type != "cuda":
        yield
        return
    cudnn = torch.backends.cudnn
    before = cudnn.allow_tf32, cudnn.benchmark
    cudnn.allow_tf32, cudnn.benchmark = False, False
    try:
        yield
    finally:
        cudnn.allow_tf32, cudnn.benchmark = before


def model_upscaler(
    model: torch.nn.Module, device: str | torch.device = "cpu", tta: bool = False,
    dtype: torch.dtype = torch.float32,
) -> UpscaleFn:
    """Whole-image upscaler for evaluation: uint8 (H, W, 3) -> float (sH, sW, 3) in [0, 255].

    ``tta``: the geometric self-ensemble (:mod:`sr.inference.ensemble`), the "+" rows of SR papers.
    ``dtype``: what the input is cast to (the model must already be in it); fp32 is the protocol,
    bf16 measures what running in bf16 costs.
    """
    @torch.inference_mode()
    def run(lr: np.ndarray) -> np.ndarray:
        # torch.tensor copies: decoded images are often read-only arrays, which from_numpy warns about
        x = torch.tensor(lr).permute(2, 0, 1)[None].float().div(255).to(device=device, dtype=dtype)
        with exact_fp32(x.device):
            y = self_ensemble(lambda t: (model(t), None), x)[0] if tta else model(x)
        y = y.float().clamp(0, 1).mul(255)
        return y[0].permute(1, 2, 0).cpu().numpy()

    return run
