"""sr.io.image: DecodedImage's checks, integer samples and quantize.

Every image is made here (numpy/PIL/tifffile). Any warning that leaks out of sr.io fails the test.
"""

from __future__ import annotations

import numpy as np
import pytest

from sr.io import (
    DecodedImage,
    encode_image,
    quantize,
    read_image,
)
from tests.io.images import as8

pytestmark = pytest.mark.filterwarnings("error")


def test_quantize_clips_and_rounds():
    x = np.array([[-0.5, 0.0, 0.4 / 255, 0.6 / 255, 1.0, 7.0, np.nan]], np.float32)
    back = read_image(encode_image(DecodedImage(x), "png"))
    np.testing.assert_array_equal(as8(back.pixels[0, :, 0]), [0, 0, 0, 1, 255, 255, 0])


def test_decoded_image_validation():
    img = DecodedImage(np.zeros((3, 4)), np.ones((3, 4, 1)))
    assert img.pixels.shape == (3, 4, 1) and img.pixels.dtype == np.float32 and img.alpha.shape == (3, 4)
    with pytest.raises(ValueError, match="pixels"):
        DecodedImage(np.zeros((3, 4, 2)))
    with pytest.raises(ValueError, match="alpha"):
        DecodedImage(np.zeros((3, 4, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="bit_depth"):
        DecodedImage(np.zeros((3, 4, 3)), bit_depth=12)


def test_integer_samples_are_kept_and_checked_against_the_bit_depth():
    px8 = np.array([[[0, 128, 255]]], np.uint8)
    img = DecodedImage(px8, alpha=np.array([[200]], np.uint8))
    assert img.pixels is px8 and img.alpha.dtype == np.uint8
    assert DecodedImage(px8.astype(np.uint16) * 257, bit_depth=16).pixels.dtype == np.uint16
    with pytest.raises(ValueError, match="8-bit integer pixels must be uint8, got uint16"):
        DecodedImage(px8.astype(np.uint16))
    with pytest.raises(ValueError, match="alpha must be uint8 samples like the pixels"):
        DecodedImage(px8, alpha=np.ones((1, 1), np.float32))


def test_quantize_rounds_clips_and_converts_between_sample_types():
    x = np.array([-1.0, 0.0, 0.5 / 255, 0.51 / 255, 1.0, 2.0, np.nan], np.float32)
    np.testing.assert_array_equal(quantize(x, np.uint8), [0, 0, 0, 1, 255, 255, 0])
    assert quantize(np.array([65535, 0], np.uint16), np.uint8).tolist() == [255, 0]
    with pytest.raises(ValueError, match="samples are uint8 or uint16"):
        quantize(x, np.int32)
