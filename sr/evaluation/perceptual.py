"""Perceptual metrics beside PSNR/SSIM: HaarPSI, ColorVideoVDP (JOD), BRISQUE and a fixed-pattern
(lattice) amplitude.

The first three come from the optional extra ``pip install '.[perceptual]'`` (piq, cvvdp, brisque);
asking for one without it is a :class:`PerceptualUnavailable` that says what to install; ``lattice``
needs only numpy and scipy. The protocol, the same for every model and peer so the figures compare:

- every metric sees the whole RGB image (uint8, sRGB), the SR output cropped like HR to a multiple of
  the scale and ``scale`` pixels cut from each border (as PSNR's crop); gray images are repeated to RGB;
- ``haarpsi``: piq's HaarPSI on [0, 1] RGB (full reference; higher is better, 1 = identical);
- ``cvvdp``: ColorVideoVDP 0.5.7 as a still image on the ``standard_fhd`` display model (24-inch FHD
  monitor, 200 cd/m^2, office light, seen from 0.6 m), in JOD (10 = no visible difference; higher is
  better); it runs on the CPU, ~0.5 s per 0.5 MP pair;
- ``cvvdp-zoom``: the same at 200% zoom (each pixel of both images a 2 x 2 block on that display):
  how a photographer inspecting detail sees it, where a fine fixed pattern hidden at 1:1 shows;
- ``brisque``: the ``brisque`` package's bundled SVM on the SR image alone (no reference; lower is
  more natural);
- ``lattice``: the amplitude, in grey levels of Y, of a pattern locked to the LR pixel grid (the dot
  lattice a sub-pixel upsampler can stamp): SR's luminance high-pass (Y minus its Gaussian blur of
  sigma 2) averaged per output phase (row mod scale, column mod scale) over HR's smooth parts (local
  standard deviation of Y under 4 grey levels), then the standard deviation of the scale * scale phase
  means (lower is better; a clean HR scores a few hundredths, its own JPEG blocks included).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

INSTALL_HINT = ("install the perceptual extra: pip install '.[perceptual]' in a checkout, or the wheel's "
                "path with [perceptual] (piq, cvvdp, brisque, opencv-python-headless, torchvision)")
CVVDP_DISPLAY = "standard_fhd"
CVVDP_ZOOM = 2  # cvvdp-zoom: the same display with the images at 200%
HAARPSI_MIN_SIDE = 16  # piq's HaarPSI (3 scales) needs 2 ** (3 + 1) pixels a side


class PerceptualUnavailable(RuntimeError):
    """A perceptual metric was asked for but its package is not installed."""


@dataclass(frozen=True)
class Metric:
    """One perceptual metric: its package, whether higher is better, how it scores (HR, SR) uint8 RGB."""

    name: str
    package: str
    higher_is_better: bool
    needs_reference: bool
    score: Callable[..., float]  # (HR, SR), and the scale where ``needs_scale``
    needs_scale: bool = False


def _rgb(img: np.ndarray) -> np.ndarray:
    # (H, W) or (H, W, 3) uint8 -> (H, W, 3) uint8
    if img.dtype != np.uint8:
        raise ValueError(f"perceptual metrics take uint8 images, got {img.dtype}")
    return np.repeat(img[:, :, None], 3, axis=2) if img.ndim == 2 else img


def _import(module: str, package: str):
    # pycvvdp imports torch.utils.cpp_extension, which warns "No CUDA runtime is found" under a CUDA
    # build of torch on a machine without a GPU (the torchvision pairing docs/evaluation.md gives):
    # nothing here compiles an extension, so the warning is noise on sr eval's standard error.
    log = logging.getLogger("torch.utils.cpp_extension")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return __import__(module, fromlist=["_"])
    except (ImportError, OSError, RuntimeError) as e:
        # ImportError: the package, or one it needs (torchvision for piq and cvvdp), is missing;
        # RuntimeError: a torchvision built for another torch ("operator torchvision::nms does not exist")
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "torchvision" in str(e):
            why += "; torchvision must be the release made for this torch"
        raise PerceptualUnavailable(
            f"the {package!r} metric package cannot be imported ({why}); {INSTALL_HINT}"
        ) from None
    finally:
        log.setLevel(level)


def _haarpsi(hr: np.ndarray, sr: np.ndarray) -> float:
    import torch

    piq = _import("piq", "piq")

    def tensor(x: np.ndarray) -> torch.Tensor:  # (H, W, 3) uint8 -> (1, 3, H, W) in [0, 1]
        return torch.from_numpy(np.array(_rgb(x))).permute(2, 0, 1)[None].float() / 255

    with torch.no_grad():
        return float(piq.haarpsi(tensor(sr), tensor(hr), data_range=1.0))


@cache
def _cvvdp_metric():
    pycvvdp = _import("pycvvdp", "cvvdp")
    import torch

    with contextlib.redirect_stdout(io.StringIO()):  # it prints its display model on construction
        return pycvvdp.cvvdp(display_name=CVVDP_DISPLAY, quiet=True, device=torch.device("cpu"))


def _cvvdp(hr: np.ndarray, sr: np.ndarray) -> float:
    import torch

    metric = _cvvdp_metric()
    with torch.no_grad():
        jod, _ = metric.predict(_rgb(sr), _rgb(hr), dim_order="HWC")
    return float(jod)


def zoom(img: np.ndarray, factor: int = CVVDP_ZOOM) -> np.ndarray:
    """The image as a viewer zoomed to ``factor`` x 100% sees it: each pixel a factor x factor block
    (nearest neighbour, what image viewers show past 100%)."""
    return np.repeat(np.repeat(img, factor, axis=0), factor, axis=1)


def _cvvdp_zoom(hr: np.ndarray, sr: np.ndarray) -> float:
    # a fine pattern (a dot lattice, grain) that hides at 1:1 on the FHD display shows at 200%
    return _cvvdp(zoom(hr), zoom(sr))


@cache
def _brisque_model():
    brisque = _import("brisque", "brisque")
    return brisque.BRISQUE(url=False)


def _brisque(hr: np.ndarray, sr: np.ndarray) -> float:
    """BRISQUE.score()'s steps, with each feature made a plain float: under numpy >= 2.4 the package's
    own score() fails on its one-element feature arrays (``float()`` of a 1-d array is an error)."""
    del hr  # no reference
    import cv2
    import skimage.color

    model = _brisque_model()
    gray = skimage.color.rgb2gray(_rgb(sr))  # (H, W) float in [0, 1], as score() makes it
    half = cv2.resize(gray, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_CUBIC)
    features = [np.asarray(f, dtype=np.float64).item() for g in (gray, half)
                for f in model.calculate_brisque_features(g, kernel_size=7, sigma=7 / 6)]
    return float(model.calculate_image_quality_score(np.array(features, dtype=np.float64)))


# The lattice measure's constants. Sigma 2 passes the 2-4 px period of a per-LR-pixel pattern at x2-x4
# into the high-pass and keeps broader shading out of it. A 7 x 7 window (about the blur's own reach)
# with a standard deviation under 4 grey levels is sky, wall or skin: where such a pattern shows and
# the image itself has almost nothing at the LR grid's period. A phase mean over fewer than
# LATTICE_MIN_PIXELS smooth pixels is noise, so an image with too little smooth area scores NaN (not
# scored) rather than a number that measures its texture.
LATTICE_SIGMA = 2.0
LATTICE_WINDOW = 7
LATTICE_SMOOTH_STD = 4.0
LATTICE_MIN_PIXELS = 32


def _luma(img: np.ndarray) -> np.ndarray:
    # uint8 gray or RGB -> Y in grey levels (MATLAB rgb2ycbcr, as PSNR's Y; gray as it is)
    from ..metrics import rgb_to_y

    return img.astype(np.float64) if img.ndim == 2 else rgb_to_y(img[:, :, :3])


def lattice(hr: np.ndarray, sr: np.ndarray, scale: int) -> float:
    """The fixed-pattern amplitude of ``sr`` at period ``scale`` (grey levels; NaN where HR has too
    little smooth area), as the module docstring defines it. ``hr`` and ``sr`` are uint8 images of one
    size whose top-left pixel is phase (0, 0) of the LR grid (the perceptual crop cuts ``scale``
    pixels, so it keeps the phases)."""
    from scipy.ndimage import gaussian_filter, uniform_filter

    if scale < 1:
        raise ValueError(f"lattice needs a scale of 1 or more, got {scale}")
    y_hr, y_sr = _luma(hr), _luma(sr)
    high = y_sr - gaussian_filter(y_sr, LATTICE_SIGMA, mode="reflect")
    mean = uniform_filter(y_hr, LATTICE_WINDOW, mode="reflect")
    var = uniform_filter(y_hr * y_hr, LATTICE_WINDOW, mode="reflect") - mean * mean
    smooth = var < LATTICE_SMOOTH_STD**2
    means = []
    for i in range(scale):
        for j in range(scale):
            m = smooth[i::scale, j::scale]
            if m.sum() < LATTICE_MIN_PIXELS:
                return float("nan")
            means.append(high[i::scale, j::scale][m].mean())
    return float(np.std(means))


METRICS: dict[str, Metric] = {
    "haarpsi": Metric("haarpsi", "piq", True, True, _haarpsi),
    "cvvdp": Metric("cvvdp", "cvvdp", True, True, _cvvdp),
    "cvvdp-zoom": Metric("cvvdp-zoom", "cvvdp", True, True, _cvvdp_zoom),
    "brisque": Metric("brisque", "brisque", False, False, _brisque),
    # numpy and scipy, which sr itself needs: nothing to install
    "lattice": Metric("lattice", "sr", False, True, lattice, needs_scale=True),
}
BASE_METRICS = ("psnr", "ssim")  # always computed: the protocol's own two


def parse_metrics(text: str) -> tuple[str, ...]:
    """'psnr,ssim,cvvdp' -> the perceptual names asked for, in order (psnr and ssim are always there).

    An unknown name is a ValueError listing the choices; a known one whose package is missing is a
    :class:`PerceptualUnavailable`, raised here, before any image is upscaled.
    """
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("no metric named; give e.g. psnr,ssim,haarpsi,cvvdp,brisque,lattice")
    unknown = [n for n in names if n not in METRICS and n not in BASE_METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; choose from "
                         f"{', '.join((*BASE_METRICS, *METRICS))}")
    chosen = tuple(dict.fromkeys(n for n in names if n in METRICS))
    for name in chosen:
        check_available(name)
    return chosen


def check_available(name: str) -> None:
    """Raise :class:`PerceptualUnavailable` unless the metric's package (and what it needs) imports."""
    metric = METRICS[name]
    if metric.package == "sr":
        return
    if metric.package == "piq":
        _import("piq", "piq")
    elif metric.package == "cvvdp":
        _import("pycvvdp", "cvvdp")
    else:
        _import("cv2", "opencv-python-headless")  # first: brisque's own ImportError is many lines
        _import("brisque", "brisque")


def min_side(names: tuple[str, ...]) -> int:
    """The fewest pixels a side (after the border crop) the named metrics can score; 0 = no minimum
    beyond PSNR/SSIM's."""
    return HAARPSI_MIN_SIDE if "haarpsi" in names else 0


def score_perceptual(
    names: tuple[str, ...], hr: np.ndarray, sr: np.ndarray, scale: int | None = None,
) -> dict[str, float]:
    """Each named metric of one (HR, SR) pair, both uint8 and already cropped alike; ``scale``, the
    upscaling factor, for the metrics that need it (``lattice``: a ValueError without it)."""
    if hr.shape[:2] != sr.shape[:2]:
        raise ValueError(f"HR {hr.shape[:2]} and SR {sr.shape[:2]} differ in size")
    out = {}
    for name in names:
        metric = METRICS[name]
        if metric.needs_scale and scale is None:
            raise ValueError(f"the {name} metric needs the scale")
        out[name] = metric.score(hr, sr, scale) if metric.needs_scale else metric.score(hr, sr)
    return out
