"""sr.io.encode: encoding every writable format, and write_image (atomic: no partial file).

Every image is made here (numpy/PIL/tifffile). Any warning that leaks out of sr.io fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sr.io import (
    DecodedImage,
    ImageEncodeError,
    ImageWriteError,
    encode_image,
    prepare_image,
    quantize,
    read_image,
    write_image,
)
from tests.io.images import as8, as16, rgb_test_image, small_image, wide_samples

pytestmark = pytest.mark.filterwarnings("error")


def rgba_image() -> tuple[np.ndarray, np.ndarray]:
    colour = rgb_test_image(12, 10, seed=7)
    alpha = np.tile(np.linspace(0, 255, 12).round().astype(np.uint8), (10, 1))
    return colour, alpha


def test_encode_png_with_and_without_alpha_exact():
    colour, alpha = rgba_image()
    img = DecodedImage(colour / 255.0, alpha / 255.0)
    back = read_image(encode_image(img, "png"))
    assert back.mode == "RGBA"
    np.testing.assert_array_equal(as8(back.pixels), colour)
    np.testing.assert_array_equal(as8(back.alpha), alpha)
    back = read_image(encode_image(DecodedImage(colour / 255.0), "PNG"))
    assert back.mode == "RGB" and back.alpha is None
    np.testing.assert_array_equal(as8(back.pixels), colour)


def test_encode_gray_png_and_gray_alpha():
    g = np.arange(20, dtype=np.uint8).reshape(4, 5) * 12
    back = read_image(encode_image(DecodedImage(g / 255.0), "png"))
    assert back.mode == "L" and back.is_gray
    back = read_image(encode_image(DecodedImage(g / 255.0, np.full((4, 5), 0.5)), "png"))
    assert back.mode == "LA" and as8(back.alpha)[0, 0] == 128


def test_encode_jpeg_composites_alpha_on_white():
    colour = np.zeros((16, 16, 3), np.float32)
    colour[..., 2] = 1.0  # blue
    alpha = np.ones((16, 16), np.float32)
    alpha[:, 8:] = 0.0
    for fmt in ("jpg", "jpeg"):
        back = read_image(encode_image(DecodedImage(colour, alpha), fmt, quality=95))
        assert back.format == "JPEG" and back.alpha is None
        np.testing.assert_allclose(back.pixels[4:12, 1:6].mean(axis=(0, 1)), [0, 0, 1], atol=0.03)
        np.testing.assert_allclose(back.pixels[4:12, 10:15].mean(axis=(0, 1)), [1, 1, 1], atol=0.03)
    gray = read_image(encode_image(DecodedImage(np.full((8, 8), 0.25)), "jpg"))
    assert gray.mode == "L" and gray.is_gray


def test_encode_webp_with_and_without_alpha():
    colour, alpha = rgba_image()
    back = read_image(encode_image(DecodedImage(colour / 255.0, alpha / 255.0), "webp", quality=90))
    assert back.format == "WEBP" and back.mode == "RGBA"
    assert np.abs(as8(back.alpha) - alpha).max() <= 2
    y, x = np.mgrid[0:32, 0:32] / 31.0
    smooth = np.stack([x, y, 1 - x * y], axis=2)  # lossy WebP is judged on content it can represent
    back = read_image(encode_image(DecodedImage(smooth), "webp", quality=95))
    assert back.alpha is None and back.mode == "RGB" and np.abs(back.pixels - smooth).mean() < 0.02


def test_16bit_to_jpeg_and_webp_is_8bit():
    img = DecodedImage(wide_samples(3, 8, 8) / 65535.0, bit_depth=16)
    for fmt in ("jpg", "webp"):
        assert read_image(encode_image(img, fmt)).bit_depth == 8


def test_encode_rejects_bad_format_quality_and_size():
    img = DecodedImage(np.zeros((2, 2, 3), np.float32))
    with pytest.raises(ImageEncodeError, match="unsupported output format 'gif'"):
        encode_image(img, "gif")
    for q in (0, 101, 9.5, True):
        with pytest.raises(ImageEncodeError, match="quality"):
            encode_image(img, "jpg", quality=q)
    wide = DecodedImage(np.zeros((1, 16_384, 3), np.float32))
    with pytest.raises(ImageEncodeError, match="too large for WEBP"):
        encode_image(wide, "webp")


def test_write_image_format_from_suffix_and_override(tmp_path):
    img = small_image()
    for name, fmt in (("a.png", "PNG"), ("b.jpg", "JPEG"), ("c.jpeg", "JPEG"), ("d.webp", "WEBP")):
        out = write_image(tmp_path / name, img)
        assert out == tmp_path / name and read_image(out).format == fmt
    out = write_image(tmp_path / "e.bin", img, format="png")
    assert read_image(out).format == "PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.jpg", "c.jpeg", "d.webp", "e.bin"]
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "a.png").stat().st_mode & 0o777 == 0o666 & ~mask


def test_write_image_unknown_suffix_leaves_nothing(tmp_path):
    with pytest.raises(ImageEncodeError, match="unsupported output format '.gif'"):
        write_image(tmp_path / "x.gif", small_image())
    assert list(tmp_path.iterdir()) == []


def test_write_16bit_png_file(tmp_path):
    s = wide_samples(3, 5, 6)
    out = write_image(tmp_path / "w.png", DecodedImage(s / 65535.0, bit_depth=16))
    np.testing.assert_array_equal(as16(read_image(out).pixels), s)


def existing_target(tmp_path: Path) -> tuple[Path, bytes]:
    target = tmp_path / "out.png"
    target.write_bytes(b"previous contents")
    return target, target.read_bytes()


def test_encoder_failure_midway_leaves_no_file(tmp_path, monkeypatch):
    def half_then_fail(self, fp, format=None, **params):
        fp.write(b"\x89PNG\r\n\x1a\n partial")
        raise OSError("encoder exploded")

    monkeypatch.setattr(Image.Image, "save", half_then_fail)
    with pytest.raises(ImageEncodeError, match="encoder exploded"):
        write_image(tmp_path / "new.png", small_image())
    assert list(tmp_path.iterdir()) == []
    target, before = existing_target(tmp_path)
    with pytest.raises(ImageEncodeError):
        write_image(target, small_image())
    assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["out.png"]


def test_disk_failure_midway_removes_temp_and_keeps_target(tmp_path, monkeypatch):
    target, before = existing_target(tmp_path)
    seen: list[int] = []

    def full_disk(fd):
        seen.append(os.fstat(fd).st_size)  # the temp file did get (some) data before failing
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(ImageWriteError, match="No space left on device"):
        write_image(target, small_image())
    assert seen and seen[0] > 0
    assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["out.png"]


def test_interrupt_before_rename_removes_temp(tmp_path, monkeypatch):
    target, before = existing_target(tmp_path)

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_image(target, small_image())
    assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["out.png"]


def test_write_into_missing_folder_or_onto_folder(tmp_path):
    with pytest.raises(ImageWriteError, match="cannot create a file"):
        write_image(tmp_path / "missing" / "x.png", small_image())
    (tmp_path / "d.png").mkdir()
    with pytest.raises(ImageWriteError, match="is a folder"):
        write_image(tmp_path / "d.png", small_image())


@pytest.mark.parametrize("fmt", ["png", "jpg", "webp"])
@pytest.mark.parametrize("depth", [8, 16])
def test_samples_encode_to_the_same_bytes_as_their_float_values(fmt, depth):
    """Without alpha: the same file (16-bit samples into 8-bit JPEG/WebP round twice, which lands on
    the same 8-bit value unless a sample sits within 1/65535 of a rounding tie)."""
    colour = np.random.default_rng(4).random((19, 21, 3), dtype=np.float32)
    kind = np.uint16 if depth == 16 else np.uint8
    samples = DecodedImage(quantize(colour, kind), bit_depth=depth)
    assert encode_image(samples, fmt) == encode_image(DecodedImage(colour, bit_depth=depth), fmt)


def test_samples_with_alpha_encode_like_floats_where_alpha_is_stored():
    rng = np.random.default_rng(5)
    colour, alpha = rng.random((9, 11, 3), dtype=np.float32), rng.random((9, 11), dtype=np.float32)
    samples = DecodedImage(quantize(colour, np.uint8), alpha=quantize(alpha, np.uint8))
    for fmt in ("png", "webp"):
        assert encode_image(samples, fmt) == encode_image(DecodedImage(colour, alpha=alpha), fmt)
    # JPEG composites on white: from samples it is what their float values give
    floats_of_samples = DecodedImage(samples.pixels.astype(np.float32) / 255,
                                     alpha=samples.alpha.astype(np.float32) / 255)
    assert encode_image(samples, "jpg") == encode_image(floats_of_samples, "jpg")


@pytest.mark.parametrize("fmt", ["png", "jpg", "webp"])
@pytest.mark.parametrize("depth", [8, 16])
def test_a_written_file_holds_the_encoded_bytes(tmp_path, fmt, depth):
    """write_image streams the encoder into the file: the same bytes encode_image returns."""
    colour, alpha = rgba_image()
    img = DecodedImage(colour / 255.0, alpha=alpha / 255.0, bit_depth=depth)
    out = write_image(tmp_path / f"x.{fmt}", img)
    assert out.read_bytes() == encode_image(img, fmt)


def test_a_prepared_image_holds_no_reference_to_the_samples(tmp_path):
    """The encoder's copy is its own: a caller that hands over its only reference frees the samples
    before the encoder runs (a big photo's samples and the encoder's buffers are never both held)."""
    import weakref

    samples = rgb_test_image(40, 30, seed=3)
    expected = encode_image(DecodedImage(samples.copy()), "jpg", 90)
    alive = weakref.ref(samples)
    prepared = prepare_image(DecodedImage(samples), "jpg", 90)
    del samples
    assert alive() is None
    assert prepared.encode() == expected
    assert prepared.write(tmp_path / "x.jpg").read_bytes() == expected


def test_disk_failure_while_the_encoder_writes_is_a_write_error(tmp_path, monkeypatch):
    """The encoder writes into the temporary file as it goes: the file's own error (errno set) is
    reported as a write error, not as the encoder's."""
    target, before = existing_target(tmp_path)

    def disk_full_midway(self, fp, format=None, **params):
        fp.write(b"\x89PNG\r\n\x1a\n partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Image.Image, "save", disk_full_midway)
    with pytest.raises(ImageWriteError, match="No space left on device"):
        write_image(target, small_image())
    assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["out.png"]
