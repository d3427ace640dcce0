"""Images and helpers the sr.io tests share (made with numpy/PIL; no sr.io involved)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageCms

from sr.io import (
    DecodedImage,
)

SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def save(im: Image.Image, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **options)
    return buf.getvalue()


def rgb_test_image(w: int = 24, h: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def as8(x: np.ndarray) -> np.ndarray:
    return np.rint(x * 255).astype(np.int32)


def as16(x: np.ndarray) -> np.ndarray:
    return np.rint(x * 65535).astype(np.int64)


def wide_samples(c: int, h: int = 9, w: int = 11) -> np.ndarray:
    """Values whose high and low bytes both vary, so an 8-bit read cannot pass."""
    rng = np.random.default_rng(c)
    return rng.integers(0, 65536, (h, w, c), dtype=np.uint16)


def frames(n: int) -> list[Image.Image]:
    return [Image.new("RGB", (8, 8), (40 * i, 200, 0)) for i in range(n)]


def small_image() -> DecodedImage:
    return DecodedImage(rgb_test_image(6, 5) / 255.0)
