"""MATLAB-compatible bicubic ``imresize`` (numpy and torch) and ``modcrop``.

This is the degradation the SR field trains and evaluates with: cubic kernel with a = -0.5,
antialiased when downscaling (kernel stretched by 1/scale), symmetric edge padding, and the output
size ``ceil(in * scale)``. Each axis is resized by a dense (out x in) weight matrix, so the numpy and
torch versions share the weights and differ only in the matmul.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch


def _cubic(x: np.ndarray) -> np.ndarray:
    # Keys' cubic convolution kernel with a = -0.5 (MATLAB's 'bicubic').
    ax = np.abs(x)
    ax2, ax3 = ax**2, ax**3
    return (1.5 * ax3 - 2.5 * ax2 + 1) * (ax <= 1) + (-0.5 * ax3 + 2.5 * ax2 - 4 * ax + 2) * (
        (ax > 1) & (ax <= 2)
    )


def axis_taps(
    in_len: int, out_len: int, scale: float, antialias: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """MATLAB imresize's taps for one axis: (source indices, weights), each (out_len, taps).

    Source indices are 0-based and already folded back into the image (symmetric padding, MATLAB's
    aux index trick); a source index can repeat within a row near the edges.
    """
    kernel_width = 4.0
    if scale < 1 and antialias:
        kernel_width /= scale
    x = np.arange(1, out_len + 1, dtype=np.float64)
    u = x / scale + 0.5 * (1 - 1 / scale)  # output pixel centre in input coordinates (1-based)
    left = np.floor(u - kernel_width / 2)
    taps = math.ceil(kernel_width) + 2
    idx = left[:, None] + np.arange(taps)[None, :]  # (out, taps), 1-based
    dist = u[:, None] - idx
    if scale < 1 and antialias:
        w = scale * _cubic(dist * scale)
    else:
        w = _cubic(dist)
    w = w / w.sum(axis=1, keepdims=True)
    mirror = np.concatenate([np.arange(in_len), np.arange(in_len - 1, -1, -1)])
    return mirror[np.mod(idx.astype(np.int64) - 1, 2 * in_len)], w


@lru_cache(maxsize=64)
def resize_matrix(in_len: int, out_len: int, scale: float, antialias: bool = True) -> np.ndarray:
    """The (out_len, in_len) float64 matrix that resizes one axis exactly as MATLAB's imresize."""
    src, w = axis_taps(in_len, out_len, scale, antialias)
    mat = np.zeros((out_len, in_len), dtype=np.float64)
    np.add.at(mat, (np.repeat(np.arange(out_len), src.shape[1]), src.ravel()), w.ravel())
    return mat


def _plan(h: int, w: int, scale: float | None, size: tuple[int, int] | None):
    if size is not None:
        out_h, out_w = size
        sh, sw = out_h / h, out_w / w
    elif scale is not None:
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        out_h, out_w = math.ceil(h * scale), math.ceil(w * scale)
        sh = sw = scale
    else:
        raise ValueError("give either scale or size")
    if out_h < 1 or out_w < 1:
        raise ValueError(f"output size {out_h}x{out_w} is empty")
    # MATLAB resizes the axis with the smaller scale first; ties: rows (height) first.
    order = ("h", "w") if sh <= sw else ("w", "h")
    return out_h, out_w, sh, sw, order


def imresize(
    img: np.ndarray,
    scale: float | None = None,
    size: tuple[int, int] | None = None,
    antialias: bool = True,
) -> np.ndarray:
    """Resize an (H, W) or (H, W, C) array like MATLAB's ``imresize(img, scale, 'bicubic')``.

    Float input stays float (no clipping); uint8/uint16 input is rounded and clipped back to its
    dtype, as MATLAB does.
    """
    if img.ndim not in (2, 3):
        raise ValueError(f"expected (H, W) or (H, W, C), got shape {img.shape}")
    h, w = img.shape[:2]
    out_h, out_w, sh, sw, order = _plan(h, w, scale, size)
    x = img.astype(np.float64)
    for axis in order:
        if axis == "h":
            m = resize_matrix(h, out_h, sh, antialias)
            x = np.tensordot(m, x, axes=([1], [0]))
        else:
            m = resize_matrix(w, out_w, sw, antialias)
            x = np.moveaxis(np.tensordot(m, x, axes=([1], [1])), 0, 1)
    if np.issubdtype(img.dtype, np.integer):
        info = np.iinfo(img.dtype)
        return np.clip(np.round(x), info.min, info.max).astype(img.dtype)
    return x.astype(img.dtype)


def imresize_torch(
    img: torch.Tensor,
    scale: float | None = None,
    size: tuple[int, int] | None = None,
    antialias: bool = True,
) -> torch.Tensor:
    """Torch version of :func:`imresize` for float tensors (..., H, W); differentiable, any device."""
    if img.ndim < 2:
        raise ValueError(f"expected (..., H, W), got shape {tuple(img.shape)}")
    if not img.is_floating_point():
        raise TypeError("imresize_torch expects a floating-point tensor")
    h, w = img.shape[-2:]
    out_h, out_w, sh, sw, order = _plan(h, w, scale, size)
    x = img
    for axis in order:
        if axis == "h":
            m = torch.from_numpy(resize_matrix(h, out_h, sh, antialias)).to(x.device, x.dtype)
            x = torch.matmul(m, x)  # (out_h, h) @ (..., h, W)
        else:
            m = torch.from_numpy(resize_matrix(w, out_w, sw, antialias)).to(x.device, x.dtype)
            x = torch.matmul(x, m.T)  # (..., H, w) @ (w, out_w)
    return x


def modcrop(img: np.ndarray, scale: int) -> np.ndarray:
    """Crop an (H, W[, C]) image so both sides are multiples of ``scale`` (bottom/right edges go)."""
    h, w = img.shape[:2]
    return img[: h - h % scale, : w - w % scale]
