"""sr.io.png16: 16-bit PNG read and written exactly, every filter type, the Paeth predictor.

Every image is made here (numpy/PIL/tifffile). Any warning that leaks out of sr.io fails the test.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from sr.io import (
    DecodedImage,
    encode_image,
    encode_png16,
    read_image,
)
from tests.io.images import SRGB, as16, save, wide_samples

pytestmark = pytest.mark.filterwarnings("error")


def test_16bit_gray_png_keeps_full_precision_and_round_trips():
    a = (np.arange(35, dtype=np.uint16).reshape(5, 7) * 1871 + 3).astype(np.uint16)
    img = read_image(save(Image.fromarray(a), "PNG"))
    assert img.bit_depth == 16 and img.mode == "I;16" and img.pixels.shape == (5, 7, 1)
    np.testing.assert_array_equal(as16(img.pixels[..., 0]), a)
    back = read_image(encode_image(img, "png"))
    assert back.bit_depth == 16 and back.is_gray
    np.testing.assert_array_equal(as16(back.pixels[..., 0]), a)


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def png16_reference(samples: np.ndarray, interlace: bool = False) -> bytes:
    """A plain 16-bit PNG (filter 0 on every row), independent of sr.io's encoder."""
    h, w, c = samples.shape
    colour_type = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    passes = [samples[y0::dy, x0::dx] for x0, y0, dx, dy in ADAM7] if interlace else [samples]
    raw = b"".join(b"\x00" + row.astype(">u2").tobytes() for p in passes if p.size for row in p)

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    ihdr = struct.pack(">IIBBBBB", w, h, 16, colour_type, 0, 0, int(interlace))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("interlace", [False, True])
@pytest.mark.parametrize("channels", [2, 3, 4])
def test_16bit_colour_and_gray_alpha_png_read_exact(channels, interlace):
    s = wide_samples(channels)
    img = read_image(png16_reference(s, interlace))
    assert img.bit_depth == 16
    colour = s[..., :3] if channels >= 3 else s[..., :1]
    np.testing.assert_array_equal(as16(img.pixels), colour)
    if channels in (2, 4):
        np.testing.assert_array_equal(as16(img.alpha), s[..., -1])
    else:
        assert img.alpha is None


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_16bit_png_encode_round_trip_exact(channels):
    s = wide_samples(channels, 13, 17)
    colour = s[..., :3] if channels >= 3 else s[..., :1]
    alpha = s[..., -1] if channels in (2, 4) else None
    img = DecodedImage(
        colour / 65535.0,
        None if alpha is None else alpha / 65535.0,
        bit_depth=16,
        icc_profile=SRGB if channels >= 3 else None,
    )
    data = encode_image(img, "png")
    back = read_image(data)
    assert back.bit_depth == 16 and back.channels == colour.shape[2]
    np.testing.assert_array_equal(as16(back.pixels), colour)
    if alpha is not None:
        np.testing.assert_array_equal(as16(back.alpha), alpha)
    assert back.icc_profile == (SRGB if channels >= 3 else None)
    # Pillow's stock (8-bit) decoder must agree on the high bytes: an independent check of the file
    stock = np.asarray(Image.open(io.BytesIO(data)))
    if channels == 3:
        np.testing.assert_array_equal(stock, (colour >> 8).astype(np.uint8))


@pytest.mark.parametrize("filter_type", [0, 1, 2, 3, 4])
def test_png16_every_filter_type_decodes(filter_type):
    s = wide_samples(3, 6, 5)
    s[:3] = np.arange(5, dtype=np.uint16)[None, :, None] * 9000 + 123  # smooth rows too
    data = encode_png16(s, filter_type=filter_type)
    first_row_filter = zlib.decompress(data[data.index(b"IDAT") + 4 :])[0]
    assert first_row_filter == filter_type
    np.testing.assert_array_equal(as16(read_image(data).pixels), s)


def test_png16_adaptive_filters_compress_smooth_images():
    y, x = np.mgrid[0:64, 0:64]
    s = np.stack([x * 1000 + y, y * 900, (x + y) * 500], axis=2).astype(np.uint16)
    adaptive, unfiltered = encode_png16(s), encode_png16(s, filter_type=0)
    assert len(adaptive) < 0.7 * len(unfiltered)
    np.testing.assert_array_equal(as16(read_image(adaptive).pixels), s)


def test_16bit_rgb_png_colour_key():
    s = wide_samples(3, 4, 4)
    key = tuple(int(v) for v in s[2, 1])
    data = png16_reference(s)
    trns = struct.pack(">HHH", *key)
    chunk = struct.pack(">I", 6) + b"tRNS" + trns + struct.pack(">I", zlib.crc32(b"tRNS" + trns))
    at = data.index(b"IDAT") - 4
    img = read_image(data[:at] + chunk + data[at:])
    assert img.bit_depth == 16 and as16(img.alpha)[2, 1] == 0 and (as16(img.alpha) == 65535).sum() == 15


def test_paeth_predictor_matches_png_spec():
    from sr.io.png16 import paeth

    def spec(a: int, b: int, c: int) -> int:  # PNG specification, section 9.4
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        return a if pa <= pb and pa <= pc else b if pb <= pc else c

    v = np.arange(0, 256, 15, dtype=np.uint8)
    a, b, c = (g.ravel() for g in np.meshgrid(v, v, v, indexing="ij"))
    expected = [spec(int(x), int(y), int(z)) for x, y, z in zip(a, b, c, strict=True)]
    np.testing.assert_array_equal(paeth(a, b, c), expected)
