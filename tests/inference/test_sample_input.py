"""Integer samples in (a decoded file's uint8/uint16, as ``sr upscale`` reads them): the engine keeps
them as integers and converts each tile as it is cut, to the floats the whole image would give."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from sr.inference import Upscaler
from sr.io import DecodedImage, quantize, to_float

# case -> (Upscaler arguments, upscale() arguments, channels, bit depth, with alpha)
CASES = {
    "tiled": ({"tile": 48}, {}, 3, 8, False),
    "whole": ({"tile": None}, {}, 3, 8, False),
    "gray": ({"tile": 48}, {}, 1, 8, False),
    "16-bit": ({"tile": 48}, {}, 3, 16, False),
    "alpha through the model": ({"tile": 48}, {"alpha_mode": "model"}, 3, 8, True),
    "two passes": ({"tile": 48}, {"outscale": 4}, 3, 8, False),
    "tta": ({"tile": 48}, {"tta": True}, 3, 8, False),
}


def samples(h: int, w: int, c: int, depth: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    smooth = np.stack([np.sin(6 * xx + 2 * k) * np.cos(4 * yy - k) for k in range(c)], axis=2)
    values = np.clip(0.5 + 0.35 * smooth + 0.08 * rng.standard_normal((h, w, c)), 0, 1)
    return quantize(values.astype(np.float32), np.uint16 if depth == 16 else np.uint8)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("out", ["float", "samples"])
def test_samples_upscale_exactly_like_their_float_values(tiny_x2, case, out):
    engine_args, call_args, c, depth, with_alpha = CASES[case]
    up = Upscaler(str(tiny_x2), device="cpu", tile_overlap=8, threads=1, **engine_args)
    px = samples(70, 90, c, depth)
    alpha = samples(70, 90, 1, depth, seed=1)[:, :, 0] if with_alpha else None
    ints = DecodedImage(px, alpha=alpha, bit_depth=depth)
    floats = DecodedImage(to_float(px), alpha=None if alpha is None else to_float(alpha), bit_depth=depth)
    a = up.upscale(ints, quantize=out == "samples", **call_args).image
    b = up.upscale(floats, quantize=out == "samples", **call_args).image
    assert a.pixels.dtype == b.pixels.dtype and a.pixels.tobytes() == b.pixels.tobytes()
    assert (a.alpha is None) == (b.alpha is None)
    if a.alpha is not None:
        assert a.alpha.tobytes() == b.alpha.tobytes()


def test_uint8_input_is_never_converted_whole(tiny_x2):
    """With 8-bit samples in and out, the numpy memory an upscale allocates stays below the output
    plus a float32 copy of the input: the tiles are converted one at a time as they are cut. (Tall, so
    that the float32 band of one tile row is small beside the image: measured 4.7 MB here against a
    bound of 6.3 MB; converting the input whole first took 7.8 MB.)"""
    up = Upscaler(str(tiny_x2), device="cpu", tile=64, tile_overlap=8, threads=1)
    img = DecodedImage(samples(1024, 256, 3, 8))
    up.upscale(DecodedImage(img.pixels[:64, :64]))  # loads the weights before the measurement
    whole_float = img.pixels.size * 4
    tracemalloc.start()
    try:
        out = up.upscale(img, quantize=True).image.pixels
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.dtype == np.uint8 and out.shape == (2048, 512, 3)
    assert peak < out.nbytes + whole_float, (peak, out.nbytes, whole_float)
