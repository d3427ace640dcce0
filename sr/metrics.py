"""PSNR and SSIM exactly as the SR literature reports them (BasicSR / MATLAB protocol).

Y channel of MATLAB's ``rgb2ycbcr`` (BT.601, values in [16, 235]), ``crop_border`` pixels removed on
each side, SR output rounded to uint8 before scoring, SSIM with an 11x11 Gaussian window (sigma 1.5,
'valid' filtering) and constants from Wang et al. A single-channel image is scored on its own gray
values, as the classic MATLAB scripts (and so the published baselines) do.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import correlate1d


def rgb_to_y(img: np.ndarray) -> np.ndarray:
    """MATLAB ``rgb2ycbcr`` luma: (H, W, 3) uint8-range floats -> (H, W) Y in [16, 235]."""
    img = img.astype(np.float64) / 255.0
    return 16.0 + img @ np.array([65.481, 128.553, 24.966])


def to_scoring_channels(img: np.ndarray, channel: str = "y") -> np.ndarray:
    """Return the (H, W, C) float64 array that is scored: Y for colour (``channel='y'``), gray as
    is for single-channel images, or all RGB channels (``channel='rgb'``)."""
    if channel not in ("y", "rgb"):
        raise ValueError(f"channel must be 'y' or 'rgb', got {channel!r}")
    img = np.asarray(img)
    if img.ndim == 2:
        img = img[:, :, None]
    if img.shape[2] == 1:
        return img.astype(np.float64)
    if channel == "y":
        return rgb_to_y(img[:, :, :3])[:, :, None]
    return img[:, :, :3].astype(np.float64)


def _prepare(sr: np.ndarray, hr: np.ndarray, crop_border: int, channel: str):
    if sr.shape[:2] != hr.shape[:2]:
        raise ValueError(f"SR {sr.shape[:2]} and HR {hr.shape[:2]} differ in size")
    # SR output is stored as 8-bit in the published protocol: round before scoring.
    sr = np.clip(np.round(np.asarray(sr, dtype=np.float64)), 0, 255)
    a, b = to_scoring_channels(sr, channel), to_scoring_channels(hr, channel)
    if a.shape[2] != b.shape[2]:
        raise ValueError(f"SR has {a.shape[2]} scored channels, HR has {b.shape[2]}")
    if crop_border > 0:
        a = a[crop_border:-crop_border, crop_border:-crop_border]
        b = b[crop_border:-crop_border, crop_border:-crop_border]
    return a, b


def psnr(sr: np.ndarray, hr: np.ndarray, crop_border: int = 0, channel: str = "y") -> float:
    """PSNR in dB between uint8-range images (H, W[, C]); infinite for identical images."""
    a, b = _prepare(sr, hr, crop_border, channel)
    mse = np.mean((a - b) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def float_psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two float images in [0, 1] (clipped), with no 8-bit rounding: for how closely two
    inference paths agree (tiled vs whole, ONNX vs torch), not for the published protocol."""
    mse = float(np.mean((np.clip(a, 0, 1).astype(np.float64) - np.clip(b, 0, 1)) ** 2))
    return float("inf") if mse == 0 else float(10 * np.log10(1 / mse))


def _gaussian_window(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    x = np.arange(size) - (size - 1) / 2
    g = np.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def _filter_valid(img: np.ndarray, g: np.ndarray) -> np.ndarray:
    r = len(g) // 2
    out = correlate1d(correlate1d(img, g, axis=0, mode="reflect"), g, axis=1, mode="reflect")
    return out[r:-r, r:-r]


def _ssim_channel(a: np.ndarray, b: np.ndarray) -> float:
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    g = _gaussian_window()
    mu_a, mu_b = _filter_valid(a, g), _filter_valid(b, g)
    var_a = _filter_valid(a * a, g) - mu_a**2
    var_b = _filter_valid(b * b, g) - mu_b**2
    cov = _filter_valid(a * b, g) - mu_a * mu_b
    ssim_map = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return float(ssim_map.mean())


def ssim(sr: np.ndarray, hr: np.ndarray, crop_border: int = 0, channel: str = "y") -> float:
    """SSIM (Wang et al. 2004, Gaussian 11x11, sigma 1.5), mean over the scored channels."""
    a, b = _prepare(sr, hr, crop_border, channel)
    if min(a.shape[:2]) < 11:
        raise ValueError(f"image {a.shape[:2]} too small for SSIM's 11x11 window after cropping")
    return float(np.mean([_ssim_channel(a[:, :, c], b[:, :, c]) for c in range(a.shape[2])]))
