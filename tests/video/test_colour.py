from __future__ import annotations

import numpy as np

from sr.video.colour import Colour, downsample_chroma, to_yuv420, upsample_chroma


def test_upsample_interpolates_not_replicates() -> None:
    c = np.array([[0, 100], [100, 200]], np.uint8)
    up = upsample_chroma(c, 4, 4)
    # odd columns are halfway between their neighbours, rows blend 3:1: no 2x2 blocks of equal values
    assert up[0, 1] == 0.75 * 50 + 0.25 * 50
    assert len(np.unique(up)) > 4


def test_chroma_round_trip_of_a_smooth_ramp() -> None:
    x = np.linspace(0, 1, 32, dtype=np.float32)
    plane = np.add.outer(x, x) * 100
    back = upsample_chroma(downsample_chroma(plane), 32, 32)
    assert np.abs(back - plane)[2:-2, 2:-2].max() < 1.0


def test_yuv_round_trip_keeps_grey_and_colour() -> None:
    colour = Colour(colorspace=1, full_range=False, primaries=1, trc=1)
    rgb = np.zeros((4, 4, 3), np.uint8)
    rgb[...] = (200, 50, 20)
    y, u, v = to_yuv420(rgb, colour)
    assert y.shape == (4, 4) and u.shape == (2, 2)
    assert 16 <= y.min() and y.max() <= 235
    grey = to_yuv420(np.full((2, 2, 3), 128, np.uint8), colour)
    assert np.all(grey[1] == 128) and np.all(grey[2] == 128)
