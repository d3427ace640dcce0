"""Final resize to an exact output size: the project's MATLAB bicubic, with sparse per-axis matrices
(:func:`fit_to` resizes an upscale's colour and alpha; budget maps take the nearest pixel).

:func:`sr.resize.imresize` builds a dense (out x in) float64 matrix per axis and works on a float64
copy of the image, which is fine for benchmark crops but costs gigabytes on a large upscaled output.
The weights here are the same (same kernel, antialiasing, symmetric padding and axis order), stored
as a CSR matrix with a handful of taps per row and applied in float32.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import sparse

from ..resize import axis_taps


@lru_cache(maxsize=16)
def axis_matrix(in_len: int, out_len: int) -> sparse.csr_matrix:
    """(out_len, in_len) float32 CSR matrix equal to ``sr.resize.resize_matrix(in_len, out_len, out/in)``."""
    src, w = axis_taps(in_len, out_len, out_len / in_len)
    rows = np.repeat(np.arange(out_len), src.shape[1])
    # COO -> CSR sums the duplicate entries that the mirrored taps create, like np.add.at in sr.resize.
    mat = sparse.coo_matrix((w.ravel(), (rows, src.ravel())), shape=(out_len, in_len)).tocsr()
    mat.sum_duplicates()
    return mat.astype(np.float32)


def resize_to(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Resize float (H, W) or (H, W, C) to exactly (out_h, out_w) with MATLAB bicubic (antialiased
    when shrinking). Returns float32; values are not clipped (bicubic overshoots slightly)."""
    if img.ndim not in (2, 3):
        raise ValueError(f"expected (H, W) or (H, W, C), got shape {img.shape}")
    if out_h < 1 or out_w < 1:
        raise ValueError(f"output size {out_h}x{out_w} is empty")
    h, w = img.shape[:2]
    x = np.asarray(img, dtype=np.float32)
    if (h, w) == (out_h, out_w):
        return x.copy()
    squeeze = x.ndim == 2
    if squeeze:
        x = x[:, :, None]
    c = x.shape[2]
    # MATLAB resizes the axis with the smaller scale first (ties: rows first); the order matters
    # slightly because each pass rounds nothing but the kernels differ.
    h_first = out_h / h <= out_w / w
    for axis in ("h", "w") if h_first else ("w", "h"):
        if axis == "h":
            if out_h != x.shape[0]:
                x = (axis_matrix(x.shape[0], out_h) @ x.reshape(x.shape[0], -1)).reshape(out_h, x.shape[1], c)
        elif out_w != x.shape[1]:
            xt = np.ascontiguousarray(x.transpose(1, 0, 2)).reshape(x.shape[1], -1)
            x = (axis_matrix(x.shape[1], out_w) @ xt).reshape(out_w, x.shape[0], c).transpose(1, 0, 2)
    x = np.ascontiguousarray(x, dtype=np.float32)
    return x[:, :, 0] if squeeze else x


def fit_to(
    pixels: np.ndarray, alpha: np.ndarray | None, out_h: int, out_w: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """The model's (H, W, C) output and the (H, W) alpha (or None) at exactly (out_h, out_w): each that
    is not already resized by :func:`resize_to` and clipped to [0, 1], the others as they are."""

    def fit(x: np.ndarray) -> np.ndarray:
        return x if x.shape[:2] == (out_h, out_w) else np.clip(resize_to(x, out_h, out_w), 0, 1)

    return fit(pixels), None if alpha is None else fit(alpha)


def nearest_resize(a: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """(h, w) -> (out_h, out_w) by the nearest pixel centre (a budget map: per region, not smoothed)."""
    h, w = a.shape
    rows = np.minimum(((np.arange(out_h) + 0.5) * h / out_h).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(out_w) + 0.5) * w / out_w).astype(np.int64), w - 1)
    return a[rows[:, None], cols[None, :]]


def mean_budget(maps: list[np.ndarray], out_h: int, out_w: int) -> np.ndarray | None:
    """The passes' (h, w) budget maps at the output size, averaged to one float32 map; None for none."""
    if not maps:
        return None
    return np.mean([nearest_resize(m, out_h, out_w) for m in maps], axis=0).astype(np.float32)
