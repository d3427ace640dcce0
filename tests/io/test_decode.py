"""sr.io.decode: every supported mode and format read exactly, EXIF orientation, sources, bad input.

Every image is made here (numpy/PIL/tifffile). Any warning that leaks out of sr.io fails the test.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from sr.io import (
    DEFAULT_MAX_PIXELS,
    AnimatedImageError,
    DecodedImage,
    ImageDecodeError,
    ImageTooLargeError,
    encode_image,
    read_image,
    read_size,
)
from tests.io.images import SRGB, as8, as16, frames, rgb_test_image, save, wide_samples

pytestmark = pytest.mark.filterwarnings("error")


def marker_jpeg(orientation: int) -> bytes:
    """48x32 gray JPEG with a red 8x8 block in its stored top-left corner."""
    a = np.full((32, 48, 3), 128, np.uint8)
    a[:8, :8] = (255, 0, 0)
    exif = Image.Exif()
    exif[0x0112] = orientation
    return save(Image.fromarray(a), "JPEG", quality=95, exif=exif.tobytes())


def is_red(block: np.ndarray) -> bool:
    mean = block.reshape(-1, 3).mean(axis=0)
    return bool(mean[0] > 0.85 and mean[1] < 0.15 and mean[2] < 0.15)


def test_exif_orientation_6_rotates_clockwise():
    img = read_image(marker_jpeg(6))
    assert img.pixels.shape == (48, 32, 3)  # width and height swapped
    assert is_red(img.pixels[1:7, -7:-1])  # stored top-left -> displayed top-right
    assert not is_red(img.pixels[1:7, 1:7])


def test_exif_orientation_3_rotates_180():
    img = read_image(marker_jpeg(3))
    assert img.pixels.shape == (32, 48, 3)
    assert is_red(img.pixels[-7:-1, -7:-1])  # stored top-left -> displayed bottom-right
    assert not is_red(img.pixels[1:7, 1:7])


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_orientation_matches_pillow_exif_transpose(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = save(Image.fromarray(rgb_test_image(7, 5)), "PNG", exif=exif.tobytes())
    expected = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
    img = read_image(data)
    np.testing.assert_array_equal(as8(img.pixels), expected)


def test_orientation_also_applies_to_alpha():
    a = np.zeros((4, 6, 4), np.uint8)
    a[..., 3] = 255
    a[0, 0, 3] = 7  # one marked alpha value in the stored top-left
    exif = Image.Exif()
    exif[0x0112] = 6
    img = read_image(save(Image.fromarray(a), "PNG", exif=exif.tobytes()))
    assert img.alpha.shape == (6, 4)
    assert as8(img.alpha)[0, -1] == 7 and (as8(img.alpha) == 255).sum() == 23


def test_gray_stays_gray():
    a = np.arange(60, dtype=np.uint8).reshape(6, 10) * 4
    img = read_image(save(Image.fromarray(a), "PNG"))
    assert img.pixels.shape == (6, 10, 1) and img.pixels.dtype == np.float32
    assert img.is_gray and not img.has_alpha and img.bit_depth == 8
    assert (img.height, img.width, img.channels) == (6, 10, 1)
    np.testing.assert_array_equal(as8(img.pixels[..., 0]), a)


def test_rgb_png_exact_and_metadata():
    a = rgb_test_image()
    img = read_image(save(Image.fromarray(a), "PNG"))
    assert (img.format, img.mode, img.bit_depth, img.alpha, img.icc_profile) == ("PNG", "RGB", 8, None, None)
    np.testing.assert_array_equal(as8(img.pixels), a)
    assert float(img.pixels.min()) >= 0.0 and float(img.pixels.max()) <= 1.0


def test_palette_with_trns_index():
    p = Image.new("P", (3, 2), 0)
    p.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255])
    p.putpixel((1, 0), 1)
    p.putpixel((2, 1), 2)
    img = read_image(save(p, "PNG", transparency=1))
    assert img.pixels.shape == (2, 3, 3) and img.mode == "P"
    expected_alpha = np.full((2, 3), 255)
    expected_alpha[0, 1] = 0
    np.testing.assert_array_equal(as8(img.alpha), expected_alpha)
    np.testing.assert_array_equal(as8(img.pixels[1, 2]), [0, 0, 255])
    np.testing.assert_array_equal(as8(img.pixels[0, 0]), [255, 0, 0])


def test_palette_with_per_entry_alpha():
    p = Image.new("P", (3, 1), 0)
    p.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255])
    p.putpixel((1, 0), 1)
    p.putpixel((2, 0), 2)
    data = save(p, "PNG", transparency=bytes([255, 128, 0]))  # tRNS with one alpha per palette entry
    img = read_image(data)
    np.testing.assert_array_equal(as8(img.alpha[0]), [255, 128, 0])
    np.testing.assert_array_equal(as8(img.pixels[0, 1]), [0, 255, 0])


def test_gif_transparency_and_gray_palette():
    p = Image.new("P", (4, 4), 0)
    p.putpalette([v for g in (0, 85, 170, 255) for v in (g, g, g)])
    p.putpixel((3, 3), 3)
    p.putpixel((0, 3), 2)
    img = read_image(save(p, "GIF", transparency=3))
    assert img.format == "GIF" and img.is_gray  # an all-gray palette stays one channel
    assert as8(img.alpha)[3, 3] == 0 and (as8(img.alpha) == 255).sum() == 15
    assert as8(img.pixels)[3, 0, 0] == 170


def test_la_splits_alpha():
    la = np.stack([np.arange(12, dtype=np.uint8).reshape(3, 4) * 20, np.full((3, 4), 99, np.uint8)], axis=2)
    la[2, 3, 1] = 0
    img = read_image(save(Image.fromarray(la), "PNG"))
    assert img.pixels.shape == (3, 4, 1) and img.alpha.shape == (3, 4)
    np.testing.assert_array_equal(as8(img.pixels[..., 0]), la[..., 0])
    np.testing.assert_array_equal(as8(img.alpha), la[..., 1])


def test_gray_and_rgb_colour_key_transparency():
    g = np.array([[5, 9], [9, 200]], np.uint8)
    img = read_image(save(Image.fromarray(g), "PNG", transparency=9))
    np.testing.assert_array_equal(as8(img.alpha), [[255, 0], [0, 255]])
    a = rgb_test_image(2, 2)
    a[1, 1] = (1, 2, 3)
    img = read_image(save(Image.fromarray(a), "PNG", transparency=(1, 2, 3)))
    assert as8(img.alpha).tolist() == [[255, 255], [255, 0]]


def test_one_bit():
    bits = np.zeros((5, 9), bool)
    bits[1, 2] = bits[4, 8] = True
    img = read_image(save(Image.fromarray(bits), "PNG"))
    assert img.mode == "1" and img.pixels.shape == (5, 9, 1) and img.bit_depth == 8
    np.testing.assert_array_equal(img.pixels[..., 0], bits.astype(np.float32))


@pytest.mark.parametrize("compression", [None, "zlib"])
def test_16bit_rgb_tiff_read_exact(compression):
    tifffile = pytest.importorskip("tifffile")
    s = wide_samples(3, 7, 5)
    buf = io.BytesIO()
    tifffile.imwrite(buf, s, photometric="rgb", compression=compression)
    img = read_image(buf.getvalue())
    assert img.format == "TIFF" and img.bit_depth == 16
    np.testing.assert_array_equal(as16(img.pixels), s)


def test_16bit_big_endian_gray_tiff():
    tifffile = pytest.importorskip("tifffile")
    s = wide_samples(1, 6, 4)[..., 0]
    buf = io.BytesIO()
    tifffile.imwrite(buf, s, byteorder=">")
    img = read_image(buf.getvalue())
    assert img.bit_depth == 16 and img.mode.startswith("I;16")
    np.testing.assert_array_equal(as16(img.pixels[..., 0]), s)


def test_mode_i_above_255_is_16bit_and_below_is_8bit():
    wide = np.array([[0, 1000], [65535, 70000]], np.int32)
    img = read_image(save(Image.fromarray(wide), "TIFF"))
    assert img.mode == "I" and img.bit_depth == 16
    np.testing.assert_array_equal(as16(img.pixels[..., 0]), [[0, 1000], [65535, 65535]])
    narrow = np.array([[0, 17], [200, 255]], np.int32)
    img = read_image(save(Image.fromarray(narrow), "TIFF"))
    assert img.mode == "I" and img.bit_depth == 8
    np.testing.assert_array_equal(as8(img.pixels[..., 0]), narrow)


def test_cmyk_jpeg_becomes_rgb():
    cmyk = Image.new("CMYK", (16, 16), (255, 0, 0, 0))  # pure cyan
    img = read_image(save(cmyk, "JPEG", quality=95))
    assert img.mode == "CMYK" and img.pixels.shape == (16, 16, 3) and img.icc_profile is None
    np.testing.assert_allclose(img.pixels.reshape(-1, 3).mean(axis=0), [0.0, 1.0, 1.0], atol=0.03)


def test_cmyk_tiff_exact_and_mismatched_profile_dropped():
    rng = np.random.default_rng(3)
    cmyk = Image.frombytes("CMYK", (5, 4), rng.integers(0, 256, 80, dtype=np.uint8).tobytes())
    expected = np.asarray(cmyk.convert("RGB"))
    img = read_image(save(cmyk, "TIFF", icc_profile=SRGB))  # an RGB profile on CMYK data: unusable
    assert img.icc_profile is None
    np.testing.assert_array_equal(as8(img.pixels), expected)


def test_icc_profile_round_trip_all_formats():
    img = read_image(save(Image.fromarray(rgb_test_image()), "PNG", icc_profile=SRGB))
    assert img.icc_profile == SRGB
    for fmt in ("png", "jpg", "webp"):
        assert read_image(encode_image(img, fmt)).icc_profile == SRGB, fmt


def test_icc_profile_not_written_when_colour_space_mismatches():
    gray = DecodedImage(np.full((4, 4, 1), 0.5, np.float32), icc_profile=SRGB)
    assert read_image(encode_image(gray, "png")).icc_profile is None


def test_webp_bmp_tiff_read_exact():
    a = rgb_test_image(10, 6)
    for fmt, options in (
        ("WEBP", {"lossless": True}),
        ("BMP", {}),
        ("TIFF", {}),
        ("TIFF", {"compression": "tiff_lzw"}),
    ):
        img = read_image(save(Image.fromarray(a), fmt, **options))
        assert img.format == fmt and img.bit_depth == 8
        np.testing.assert_array_equal(as8(img.pixels), a, err_msg=fmt)


def test_rgba_webp_read_keeps_alpha():
    a = np.dstack([rgb_test_image(8, 8), np.tile(np.arange(0, 256, 32, dtype=np.uint8), (8, 1))])
    img = read_image(save(Image.fromarray(a), "WEBP", lossless=True))
    np.testing.assert_array_equal(as8(img.alpha), a[..., 3])


BENCHMARK = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "benchmark"


@pytest.mark.skipif(not (BENCHMARK / "Set14").is_dir(), reason="needs ../shared/datasets/benchmark")
def test_real_benchmark_images_match_pillow():
    files = sorted(p for p in (BENCHMARK / "Set14").iterdir() if p.suffix.lower() in (".png", ".bmp", ".jpg"))
    assert files
    for p in files:
        img = read_image(p)
        with Image.open(p) as im:
            expected = np.asarray(im.convert("L" if img.is_gray else "RGB"))
        np.testing.assert_array_equal(as8(img.pixels).reshape(expected.shape), expected, err_msg=p.name)


def test_sources_path_bytes_and_file_object(tmp_path):
    a = rgb_test_image(5, 4)
    data = save(Image.fromarray(a), "PNG")
    p = tmp_path / "x.png"
    p.write_bytes(data)
    for source in (p, str(p), data, bytearray(data), io.BytesIO(data)):
        np.testing.assert_array_equal(as8(read_image(source).pixels), a)
    with open(p, "rb") as f:
        np.testing.assert_array_equal(as8(read_image(f).pixels), a)


@pytest.mark.parametrize("fmt", ["GIF", "WEBP", "PNG", "TIFF"])
def test_multi_frame_images_rejected(fmt):
    first, *rest = frames(3)
    data = save(first, fmt, save_all=True, append_images=rest)
    with pytest.raises(AnimatedImageError, match="3 frames"):
        read_image(data)


def test_mpo_reads_the_first_frame():
    first, second = frames(2)
    img = read_image(save(first, "MPO", save_all=True, append_images=[second], quality=95))
    assert img.format == "MPO" and img.pixels.shape == (8, 8, 3)
    np.testing.assert_allclose(img.pixels.mean(axis=(0, 1)), [0, 200 / 255, 0], atol=0.03)


def test_single_frame_gif_is_fine():
    img = read_image(save(frames(1)[0], "GIF"))
    assert img.pixels.shape == (8, 8, 3) and as8(img.pixels[0, 0]).tolist() == [0, 200, 0]


def noisy_png_and_jpeg() -> tuple[bytes, bytes]:
    a = rgb_test_image(96, 96, seed=5)
    return save(Image.fromarray(a), "PNG"), save(Image.fromarray(a), "JPEG", quality=90)


@pytest.mark.parametrize("which", [0, 1])
def test_truncated_files_rejected(which):
    data = noisy_png_and_jpeg()[which]
    with pytest.raises(ImageDecodeError, match="truncated or corrupt"):
        read_image(data[: len(data) // 2])


def test_corrupt_png_crc_rejected():
    data = bytearray(noisy_png_and_jpeg()[0])
    at = data.index(b"IDAT") + 100
    data[at] ^= 0xFF
    with pytest.raises(ImageDecodeError):
        read_image(bytes(data))


def test_zero_bytes_rejected(tmp_path):
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(ImageDecodeError, match="empty file") as info:
        read_image(empty)
    assert info.value.path == str(empty) and str(empty) in str(info.value)
    with pytest.raises(ImageDecodeError, match="empty file"):
        read_image(b"")


def test_text_file_rejected(tmp_path):
    txt = tmp_path / "notes.png"
    txt.write_text("this is not an image\n")
    with pytest.raises(ImageDecodeError, match="not an image") as info:
        read_image(txt)
    assert info.value.reason.startswith("not an image") and isinstance(info.value, ValueError)


def test_missing_file_and_folder_rejected(tmp_path):
    with pytest.raises(ImageDecodeError, match="file not found"):
        read_image(tmp_path / "nope.png")
    with pytest.raises(ImageDecodeError, match="folder"):
        read_image(tmp_path)


def test_unsupported_format_and_mode_rejected():
    with pytest.raises(ImageDecodeError, match="not an image"):
        read_image(save(Image.new("RGB", (4, 4)), "PCX"))  # a real image, but not on the allow-list
    with pytest.raises(ImageDecodeError, match="unsupported pixel mode F"):
        read_image(save(Image.new("F", (4, 4), 0.5), "TIFF"))


def bomb_png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def test_bomb_header_rejected_without_pixel_data():
    # Pillow refuses this size itself, from its header read, before our check; the message still
    # quotes the caller's limit (a 413 from the service names the service's limit, not Pillow's).
    with pytest.raises(ImageTooLargeError, match="^10,000,000,000 pixels, over the limit of 67,108,864$"):
        read_image(bomb_png(100_000, 100_000))
    with pytest.raises(ImageTooLargeError, match="^10,000,000,000 pixels, over Pillow's decompression-bomb"):
        read_image(bomb_png(100_000, 100_000), max_pixels=None)


def test_own_limit_checked_before_decoding(monkeypatch):
    data = save(Image.fromarray(rgb_test_image(40, 30)), "PNG")

    def no_decoding(self):
        raise AssertionError("pixels decoded before the size check")

    monkeypatch.setattr("PIL.ImageFile.ImageFile.load", no_decoding)
    with pytest.raises(ImageTooLargeError, match="40x30 is 1,200 pixels, over the limit of 1,000"):
        read_image(data, max_pixels=1000)


def test_limit_is_inclusive_and_default_is_large():
    data = save(Image.fromarray(rgb_test_image(40, 30)), "PNG")
    assert read_image(data, max_pixels=1200).pixels.shape == (30, 40, 3)
    assert read_image(data, max_pixels=None).pixels.shape == (30, 40, 3)
    assert DEFAULT_MAX_PIXELS >= 32 * 2**20


@pytest.mark.parametrize("size", [(40, 40), (80, 80)])  # over Pillow's limit: warning range, then error range
def test_pillow_bomb_warning_and_error_become_too_large(monkeypatch, size):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    data = save(Image.new("RGB", size), "PNG")
    with pytest.raises(ImageTooLargeError):
        read_image(data, max_pixels=10**9)


def test_a_header_read_does_not_wait_for_another_threads_decode():
    import threading
    import warnings

    from sr.io.decode import quiet_pillow

    filters = list(warnings.filters)
    inside, release, sizes = threading.Event(), threading.Event(), []

    def long_decode() -> None:  # holds Pillow's settings as a slow decode would
        with quiet_pillow():
            inside.set()
            release.wait(10)

    holder = threading.Thread(target=long_decode)
    holder.start()
    assert inside.wait(5)
    reader = threading.Thread(target=lambda: sizes.append(read_size(save(Image.new("RGB", (5, 3)), "PNG"))))
    reader.start()
    reader.join(5)
    done = not reader.is_alive()
    release.set()
    holder.join(5)
    assert done and sizes == [(5, 3)]
    assert warnings.filters == filters  # restored once the last user left


def test_read_size_of_a_png_reads_no_pixel_data():
    # Pillow's PNG getexif() decodes the whole image: read_size must not call it.
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: the size read is (height, width)
    png = bytearray(save(Image.new("RGB", (50, 30), (9, 99, 199)), "PNG", exif=exif))
    idat = png.index(b"IDAT")
    png[idat + 6 : idat + 12] = b"\xff" * 6  # the pixel data no longer inflates
    assert read_size(bytes(png)) == (30, 50)
    with pytest.raises(ImageDecodeError):
        read_image(bytes(png))
