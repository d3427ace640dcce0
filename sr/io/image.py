"""A decoded image (:class:`DecodedImage`) and the sample conversions between integers and floats."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_TYPES = {8: np.uint8, 16: np.uint16}  # bit depth -> the integer type of its samples


@dataclass(eq=False)  # array fields: == would be ambiguous
class DecodedImage:
    """Decoded pixels plus what is needed to write them back faithfully.

    ``pixels`` is float32 (H, W, C) in [0, 1] with C = 1 (gray) or 3 (colour); a 2-D array is taken
    as gray. ``alpha`` is float32 (H, W) or None. ``bit_depth`` 16 means: write back as 16-bit PNG.
    Pixels may instead be integer samples, uint8 for 8-bit and uint16 for 16-bit images (what
    ``Upscaler.upscale(..., quantize=True)`` returns: a quarter of float32's memory); alpha, if
    any, is then samples of the same type. Decoding always gives float32.
    """

    pixels: np.ndarray
    alpha: np.ndarray | None = None
    bit_depth: int = 8
    icc_profile: bytes | None = None
    format: str | None = None
    mode: str | None = None

    def __post_init__(self) -> None:
        if self.bit_depth not in (8, 16):
            raise ValueError(f"bit_depth must be 8 or 16, got {self.bit_depth}")
        samples = SAMPLE_TYPES[self.bit_depth]
        px = self.pixels
        if not (isinstance(px, np.ndarray) and px.dtype == samples):
            if isinstance(px, np.ndarray) and px.dtype.kind in "ui":
                raise ValueError(f"{self.bit_depth}-bit integer pixels must be {np.dtype(samples)}, "
                                 f"got {px.dtype}")
            px = np.asarray(px, dtype=np.float32)
        if px.ndim == 2:
            px = px[:, :, None]
        if px.ndim != 3 or px.shape[2] not in (1, 3):
            raise ValueError(f"pixels must be (H, W, 1) or (H, W, 3), got shape {px.shape}")
        self.pixels = px
        if self.alpha is not None:
            a = self.alpha
            if px.dtype != np.float32 and not (isinstance(a, np.ndarray) and a.dtype == px.dtype):
                raise ValueError(f"alpha must be {px.dtype} samples like the pixels")
            a = np.asarray(a, dtype=px.dtype)
            if a.ndim == 3 and a.shape[2] == 1:
                a = a[:, :, 0]
            if a.shape != px.shape[:2]:
                raise ValueError(f"alpha must be {px.shape[:2]}, got shape {a.shape}")
            self.alpha = a

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def channels(self) -> int:
        return int(self.pixels.shape[2])

    @property
    def is_gray(self) -> bool:
        return self.pixels.shape[2] == 1

    @property
    def has_alpha(self) -> bool:
        return self.alpha is not None



def quantize(x: np.ndarray, dtype: type, scratch: bool = False) -> np.ndarray:
    """Float samples in [0, 1] (clipped; NaN -> 0) to uint8 or uint16, rounded to nearest. Integer
    samples are returned as they are when already ``dtype``, else rescaled through float.
    ``scratch``: a float32 ``x`` may be overwritten (no working copy)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.uint8, np.uint16):
        raise ValueError(f"samples are uint8 or uint16, not {dtype}")
    if x.dtype == dtype:
        return x
    if x.dtype.kind in "ui":
        x = to_float(x)
    maxv = np.float32(np.iinfo(dtype).max)
    # One float32 working copy (none for scratch), then in place: each step of a chained expression
    # would allocate another image-sized temporary. fmax/fmin skip NaN, so NaN -> 0 and +-inf clip to
    # 1 / 0 in the clipping passes themselves: the values of nan_to_num + clip, without its four
    # extra full passes (isnan, isposinf, isneginf, copy).
    x = np.asarray(x, dtype=np.float32)
    y = np.fmax(x, np.float32(0.0), out=x if scratch else None)
    np.fmin(y, np.float32(1.0), out=y)
    y *= maxv
    np.rint(y, out=y)
    return y.astype(dtype)


def to_float(x: np.ndarray) -> np.ndarray:
    """uint8/uint16 samples to float32 in [0, 1]; float input as float32."""
    if x.dtype.kind in "ui":
        # one pass into the one float32 array: the same division as casting first, then dividing
        return np.divide(x, np.float32(np.iinfo(x.dtype).max), dtype=np.float32)
    return np.asarray(x, dtype=np.float32)
