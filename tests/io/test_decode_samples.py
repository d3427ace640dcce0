"""read_image(samples=True): the file's integers, which sr.io.to_float turns into exactly the floats
a float decode gives, for every mode and orientation the float decode handles."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from sr.io import SAMPLE_TYPES, read_image, to_float
from tests.io.images import SRGB, rgb_test_image, save, wide_samples

pytestmark = pytest.mark.filterwarnings("error")


def rotated(a: np.ndarray, fmt: str, orientation: int, **options) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return save(Image.fromarray(a), fmt, exif=exif.tobytes(), **options)


def tiff16(channels: int) -> bytes:
    tifffile = pytest.importorskip("tifffile")
    s = wide_samples(channels, 7, 5)
    buf = io.BytesIO()
    tifffile.imwrite(buf, s if channels == 3 else s[..., 0], photometric="rgb" if channels == 3 else None)
    return buf.getvalue()


def rgba() -> np.ndarray:
    alpha = np.arange(24, dtype=np.uint8).reshape(4, 6, 1) * 10
    return np.concatenate([rgb_test_image(6, 4, seed=3), alpha], axis=2)


SOURCES = {
    "rgb jpeg, orientation 6": lambda: rotated(rgb_test_image(9, 7), "JPEG", 6, quality=90),
    "rgb png with a profile": lambda: save(Image.fromarray(rgb_test_image(5, 3)), "PNG", icc_profile=SRGB),
    "gray png": lambda: save(Image.fromarray(rgb_test_image(5, 3)[..., 0]), "PNG"),
    "rgba png, orientation 8": lambda: rotated(rgba(), "PNG", 8),
    "la png": lambda: save(Image.fromarray(rgba()[..., [0, 3]]), "PNG"),
    "palette with a transparent index": lambda: save(
        Image.fromarray(rgb_test_image(6, 4)).quantize(8), "PNG", transparency=2),
    "rgb colour key": lambda: save(Image.fromarray(rgb_test_image(3, 3)), "PNG",
                                   transparency=tuple(int(v) for v in rgb_test_image(3, 3)[1, 1])),
    "one bit": lambda: save(Image.fromarray(rgb_test_image(9, 5)[..., 0] > 127), "PNG"),
    "cmyk jpeg": lambda: save(Image.new("CMYK", (8, 8), (255, 0, 40, 0)), "JPEG", quality=95),
    "mode I, 8-bit values": lambda: save(Image.fromarray(np.array([[0, 17], [200, 255]], np.int32)), "TIFF"),
    "mode I, 16-bit values": lambda: save(Image.fromarray(np.array([[0, 1000], [65535, 9]], np.int32)),
                                          "TIFF"),
    "16-bit gray png": lambda: save(Image.fromarray(wide_samples(1, 4, 6)[..., 0]), "PNG"),
    "16-bit rgb tiff": lambda: tiff16(3),
    "16-bit gray tiff": lambda: tiff16(1),
}


@pytest.mark.parametrize("name", SOURCES)
def test_samples_are_the_integers_of_the_float_decode(name):
    data = SOURCES[name]()
    floats, ints = read_image(data), read_image(data, samples=True)
    kind = SAMPLE_TYPES[floats.bit_depth]
    assert ints.pixels.dtype == kind and ints.bit_depth == floats.bit_depth
    assert (ints.format, ints.mode, ints.icc_profile) == (floats.format, floats.mode, floats.icc_profile)
    assert ints.pixels.shape == floats.pixels.shape
    # bit for bit: the engine converts samples tile by tile and must see the float decode's values
    assert to_float(ints.pixels).tobytes() == floats.pixels.tobytes()
    assert (ints.alpha is None) == (floats.alpha is None)
    if ints.alpha is not None:
        assert ints.alpha.dtype == kind and to_float(ints.alpha).tobytes() == floats.alpha.tobytes()


def test_an_8bit_photo_decodes_to_a_quarter_of_float32s_bytes():
    data = save(Image.fromarray(rgb_test_image(64, 48)), "JPEG", quality=90)
    assert read_image(data, samples=True).pixels.nbytes * 4 == read_image(data).pixels.nbytes
