"""YUV <-> RGB for the network, with the input's matrix and range, and 4:2:0 chroma interpolated.

Done here in numpy rather than by swscale: its default YUV -> RGB path replicates each chroma sample
over 2x2 pixels, and that blockiness is what the network then sharpens (measured: 1.8 dB of
the model's gain lost to it). The siting is MPEG-2/H.264's default: chroma co-sited with even luma
columns, midway between luma rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# (Kr, Kb) of the luma equation, by FFmpeg's colorspace number (AVColorSpace).
_BT709, _BT601, _BT2020 = (0.2126, 0.0722), (0.299, 0.114), (0.2627, 0.0593)
_MATRICES = {1: _BT709, 5: _BT601, 6: _BT601, 9: _BT2020, 10: _BT2020}
UNSPECIFIED = 2  # AVCOL_SPC/PRI/TRC_UNSPECIFIED
RANGE_MPEG, RANGE_JPEG = 1, 2
# The only input layouts converted here; anything else is an unsupported pixel format (one line).
PLANAR_FORMATS = {"yuv420p": 2, "yuvj420p": 2, "yuv444p": 1, "yuvj444p": 1}


@dataclass(frozen=True)
class Colour:
    """How the video's samples map to RGB, and the tags the output carries over."""

    colorspace: int  # the matrix used (never unspecified: guessed from the height as decoders do)
    full_range: bool
    primaries: int
    trc: int

    @property
    def kr_kb(self) -> tuple[float, float]:
        return _MATRICES.get(self.colorspace, _BT601)


def colour_of(frame: object, height: int) -> Colour:
    """The colour of a decoded frame; an unspecified matrix is what players assume by size."""
    space = int(frame.colorspace)
    if space not in _MATRICES:
        space = 1 if height >= 720 else 6
    full = int(frame.color_range) == RANGE_JPEG or frame.format.name.startswith("yuvj")
    return Colour(space, full, int(frame.color_primaries), int(frame.color_trc))


def _plane(frame: object, i: int) -> np.ndarray:
    p = frame.planes[i]
    return np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, : p.width]


def upsample_chroma(c: np.ndarray, h: int, w: int) -> np.ndarray:
    """A 4:2:0 chroma plane at luma size by linear interpolation (left-sited columns, centred rows)."""
    c = c.astype(np.float32)
    # rows: luma row 2k sits at chroma k - 1/4, row 2k+1 at k + 1/4
    up = np.concatenate([c[:1], c[:-1]], axis=0)
    down = np.concatenate([c[1:], c[-1:]], axis=0)
    rows = np.empty((c.shape[0] * 2, c.shape[1]), np.float32)
    rows[0::2] = 0.75 * c + 0.25 * up
    rows[1::2] = 0.75 * c + 0.25 * down
    # columns: luma column 2k is chroma k, column 2k+1 halfway to k+1
    right = np.concatenate([rows[:, 1:], rows[:, -1:]], axis=1)
    out = np.empty((rows.shape[0], rows.shape[1] * 2), np.float32)
    out[:, 0::2] = rows
    out[:, 1::2] = 0.5 * (rows + right)
    return out[:h, :w]


def downsample_chroma(c: np.ndarray) -> np.ndarray:
    """Full-size chroma -> 4:2:0 with the same siting: rows averaged in pairs, columns [1 2 1]/4."""
    h, w = c.shape
    c = np.pad(c, ((0, h % 2), (0, w % 2)), mode="edge")
    rows = 0.5 * (c[0::2] + c[1::2])
    left = np.concatenate([rows[:, :1], rows[:, 1:-1:2]], axis=1)
    mid = rows[:, 0::2]
    right = rows[:, 1::2]
    return 0.25 * left + 0.5 * mid + 0.25 * right


def _scales(colour: Colour) -> tuple[float, float, float]:
    """(luma offset, luma span, chroma span) in 8-bit codes."""
    return (0.0, 255.0, 255.0) if colour.full_range else (16.0, 219.0, 224.0)


def to_rgb(frame: object, colour: Colour) -> np.ndarray:
    """A decoded 8-bit planar YUV frame -> float32 RGB (H, W, 3) in [0, 1]."""
    sub = PLANAR_FORMATS[frame.format.name]
    y = _plane(frame, 0).astype(np.float32)
    h, w = y.shape
    u, v = _plane(frame, 1), _plane(frame, 2)
    if sub == 2:
        u, v = upsample_chroma(u, h, w), upsample_chroma(v, h, w)
    else:
        u, v = u.astype(np.float32), v.astype(np.float32)
    off, ys, cs = _scales(colour)
    kr, kb = colour.kr_kb
    kg = 1.0 - kr - kb
    yy = (y - off) / ys
    pb = (u - 128.0) / cs
    pr = (v - 128.0) / cs
    r = yy + 2 * (1 - kr) * pr
    b = yy + 2 * (1 - kb) * pb
    g = (yy - kr * r - kb * b) / kg
    return np.clip(np.stack([r, g, b], axis=2), 0.0, 1.0)


def to_yuv420(rgb: np.ndarray, colour: Colour) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint8 or float RGB (H, W, 3) -> 8-bit Y, U, V planes (4:2:0) in the input's matrix and range."""
    x = rgb.astype(np.float32)
    if rgb.dtype == np.uint8:
        x /= 255.0
    kr, kb = colour.kr_kb
    kg = 1.0 - kr - kb
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    y = kr * r + kg * g + kb * b
    pb = (b - y) / (2 * (1 - kb))
    pr = (r - y) / (2 * (1 - kr))
    off, ys, cs = _scales(colour)

    def code(a: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(a), 0, 255).astype(np.uint8)

    return (code(off + ys * y), code(128.0 + cs * downsample_chroma(pb)),
            code(128.0 + cs * downsample_chroma(pr)))
