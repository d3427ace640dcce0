"""sr.io: decoding every supported mode/format, typed errors for bad input, encoding, atomic writes.

Every image is made here (numpy/PIL/tifffile). Any warning that leaks out of sr.io fails the test.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms, ImageOps

from sr.io import (
    DEFAULT_MAX_PIXELS,
    AnimatedImageError,
    DecodedImage,
    ImageDecodeError,
    ImageEncodeError,
    ImageError,
    ImageTooLargeError,
    ImageWriteError,
    encode_image,
    encode_png16,
    format_from_path,
    normalize_format,
    quantize,
    read_image,
    read_size,
    suffix_for,
    write_image,
)

pytestmark = pytest.mark.filterwarnings("error")

SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def save(im: Image.Image, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **options)
    return buf.getvalue()


def rgb_test_image(w: int = 24, h: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def as8(x: np.ndarray) -> np.ndarray:
    return np.rint(x * 255).astype(np.int32)


def as16(x: np.ndarray) -> np.ndarray:
    return np.rint(x * 65535).astype(np.int64)


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


# ---------------------------------------------------------------------------------- orientation


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


# ------------------------------------------------------------------------------- modes and formats


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


def wide_samples(c: int, h: int = 9, w: int = 11) -> np.ndarray:
    """Values whose high and low bytes both vary, so an 8-bit read cannot pass."""
    rng = np.random.default_rng(c)
    return rng.integers(0, 65536, (h, w, c), dtype=np.uint16)


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


# ------------------------------------------------------------------------------------- bad input


def frames(n: int) -> list[Image.Image]:
    return [Image.new("RGB", (8, 8), (40 * i, 200, 0)) for i in range(n)]


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
    with pytest.raises(ImageTooLargeError, match="too many pixels"):
        read_image(bomb_png(100_000, 100_000))


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


def test_error_hierarchy():
    for cls in (ImageDecodeError, AnimatedImageError, ImageTooLargeError, ImageEncodeError, ImageWriteError):
        assert issubclass(cls, ImageError) and issubclass(cls, ValueError)
    e = ImageDecodeError("broken", "a/b.png")
    assert (e.reason, e.path, str(e)) == ("broken", "a/b.png", "a/b.png: broken")
    assert str(ImageDecodeError("broken")) == "broken"


# ------------------------------------------------------------------------------------- encoding


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


def test_quantize_clips_and_rounds():
    x = np.array([[-0.5, 0.0, 0.4 / 255, 0.6 / 255, 1.0, 7.0, np.nan]], np.float32)
    back = read_image(encode_image(DecodedImage(x), "png"))
    np.testing.assert_array_equal(as8(back.pixels[0, :, 0]), [0, 0, 0, 1, 255, 255, 0])


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


def test_decoded_image_validation():
    img = DecodedImage(np.zeros((3, 4)), np.ones((3, 4, 1)))
    assert img.pixels.shape == (3, 4, 1) and img.pixels.dtype == np.float32 and img.alpha.shape == (3, 4)
    with pytest.raises(ValueError, match="pixels"):
        DecodedImage(np.zeros((3, 4, 2)))
    with pytest.raises(ValueError, match="alpha"):
        DecodedImage(np.zeros((3, 4, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="bit_depth"):
        DecodedImage(np.zeros((3, 4, 3)), bit_depth=12)


def test_format_helpers():
    assert [normalize_format(f) for f in ("PNG", ".jpg", "JPEG", "webp")] == ["png", "jpeg", "jpeg", "webp"]
    assert [suffix_for(f) for f in ("png", "jpeg", "WEBP")] == [".png", ".jpg", ".webp"]
    assert format_from_path("a/b.JPG") == "jpeg"
    with pytest.raises(ImageEncodeError, match=r"unsupported output format 'gif' \(use png, jpg or webp\)"):
        normalize_format("gif")
    with pytest.raises(ImageEncodeError, match=r"no file suffix .*\(use \.png, \.jpg or \.webp\)"):
        format_from_path("out")


# ------------------------------------------------------------------------------ atomic writes


def small_image() -> DecodedImage:
    return DecodedImage(rgb_test_image(6, 5) / 255.0)


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


# ------------------------------------------------------------------------ atomic_write, FORMATS table


def test_atomic_write_failure_mid_write_leaves_neither_target_nor_temp(tmp_path):
    from sr.io import atomic_write

    def half(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(tmp_path / "new.bin", half)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old.bin").write_bytes(b"before")

    def interrupted(f):
        f.write(b"x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "old.bin", interrupted)
    assert [p.name for p in tmp_path.iterdir()] == ["old.bin"]
    assert (tmp_path / "old.bin").read_bytes() == b"before"


def test_atomic_write_fsyncs_before_the_rename(tmp_path, monkeypatch):
    from sr.io import atomic_write

    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    atomic_write(tmp_path / "a.bin", b"bytes")
    atomic_write(tmp_path / "b.bin", lambda f: f.write(b"callback"))
    assert calls == ["fsync", "replace"] * 2
    assert (tmp_path / "a.bin").read_bytes() == b"bytes" and (tmp_path / "b.bin").read_bytes() == b"callback"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.bin"]


def test_every_file_writer_goes_through_atomic_write(tmp_path, monkeypatch):
    import torch

    import sr.io
    from sr.data.patches import cached
    from sr.models import NetConfig, SRNet
    from sr.train.loop import atomic_save
    from sr.weights import load_weights, save_weights

    written = []
    real = sr.io.atomic_write

    def spy(path, data):
        written.append(Path(path).name)
        return real(path, data)

    for module in ("sr.io.encode", "sr.weights", "sr.data.patches", "sr.train.loop"):
        monkeypatch.setattr(f"{module}.atomic_write", spy)
    write_image(tmp_path / "img.png", small_image())
    net = SRNet(NetConfig(scale=2, channels=8, blocks=1, attention="none"))
    save_weights(net, tmp_path / "w.safetensors")
    atomic_save({"step": 1}, tmp_path / "ckpt.pt")
    cached(tmp_path, "key", lambda: np.arange(4))
    assert written == ["img.png", "w.safetensors", "ckpt.pt", "key.npy"]
    assert load_weights(tmp_path / "w.safetensors")[0].scale == 2
    assert torch.load(tmp_path / "ckpt.pt") == {"step": 1}
    np.testing.assert_array_equal(cached(tmp_path, "key", lambda: None), np.arange(4))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_every_format_list_is_derived_from_the_formats_table():
    import typing

    import sr.service.app
    from sr.batch.jobs import same_format
    from sr.commands.upscale import format_choices
    from sr.io import FORMATS, listed_suffixes, read_formats, read_suffixes
    from sr.service.pipeline import mime_types, output_format, request_formats

    assert read_formats() == ("PNG", "JPEG", "WEBP", "BMP", "TIFF", "GIF", "PPM", "AVIF")
    assert tuple(f.name for f in FORMATS.values() if f.writable) == ("png", "jpeg", "webp")
    assert format_choices() == ("png", "jpg", "webp", "same")
    assert read_suffixes() == {".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".ppm",
                               ".pgm", ".pbm", ".pnm", ".avif"}
    assert listed_suffixes() == {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"}
    same = [same_format(Path(f"a{s}")) for s in (".JPEG", ".webp", ".png", ".tif")]
    assert same == ["jpg", "webp", "png", "png"]
    assert request_formats() == ("png", "jpg", "jpeg", "webp", "same")
    want = {"png": "image/png", "jpg": "image/jpeg", "webp": "image/webp"}
    assert mime_types() == sr.service.app.MIME == want
    assert [output_format("same", s) for s in ("PNG", "JPEG", "MPO", "WEBP", "TIFF", None)] == [
        "png", "jpg", "jpg", "webp", "png", "png"]
    assert output_format("jpeg", None) == "jpg"
    hint = typing.get_type_hints(sr.service.app.upscale, include_extras=True)["fmt"]
    assert typing.get_args(typing.get_args(hint)[0]) == request_formats()


def test_a_new_format_is_one_row(tmp_path, monkeypatch):
    """One row added to FORMATS reaches the readers, the writers, the CLI and the dataset listings."""
    import sr.io
    import sr.service.pipeline
    from sr.batch.jobs import collect_inputs, same_format
    from sr.cli import build_parser
    from sr.data.patches import find_images
    from sr.evaluation import list_images

    monkeypatch.setitem(sr.io.FORMATS, "tga", sr.io.ImageFormat(
        "tga", "TGA", (".tga",), "image/x-tga", writable=True, max_side=65_535, signatures=(b"\0\0\x02",)))
    Image.fromarray(np.full((4, 6, 3), 99, np.uint8)).save(tmp_path / "a.tga")
    assert read_image(tmp_path / "a.tga").width == 6
    write_image(tmp_path / "b.tga", small_image())
    with Image.open(tmp_path / "b.tga") as im:
        assert im.format == "TGA" and suffix_for("TGA") == ".tga"
    assert [p.name for p in list_images(tmp_path)] == ["a.tga", "b.tga"]
    assert [p.name for p in find_images([tmp_path])] == ["a.tga", "b.tga"]
    assert [j.src.name for j in collect_inputs([str(tmp_path)], False)] == ["a.tga", "b.tga"]
    assert same_format(tmp_path / "a.tga") == "tga"
    args = build_parser("upscale").parse_args(["upscale", "x.png", "-o", "out", "-f", "tga"])
    assert args.format == "tga"
    assert sr.service.pipeline.request_formats()[-2:] == ("tga", "same")
    assert sr.service.pipeline.mime_types()["tga"] == "image/x-tga"
    assert sr.service.pipeline.output_format("same", "TGA") == "tga"
    assert sr.service.pipeline.looks_like_image((tmp_path / "a.tga").read_bytes())


# ------------------------------------------------------------------------------ decode-cost limits


def test_progressive_jpeg_scan_bomb_is_refused_from_its_structure():
    from sr.bench.serve import scan_bomb_jpeg
    from sr.io import MAX_JPEG_SCANS, DecodeLimitError, check_decode_cost

    bomb = scan_bomb_jpeg(512, 3000)
    with pytest.raises(DecodeLimitError, match=f"over {MAX_JPEG_SCANS} scans"):
        read_size(bomb)
    with pytest.raises(DecodeLimitError):
        read_image(bomb)
    check_decode_cost(scan_bomb_jpeg(512, 20))  # a few extra scans: still a plausible file
    assert read_image(save(Image.new("L", (64, 48), 90), "JPEG", progressive=True)).width == 64


def test_jpeg_whose_data_cannot_fill_its_declared_size_is_truncated():
    big = save(Image.new("L", (64, 64), 90), "JPEG")
    sof = big.index(b"\xff\xc0")
    forged = big[: sof + 5] + struct.pack(">HH", 4000, 4000) + big[sof + 9 :]  # claims 4000x4000
    with pytest.raises(ImageDecodeError, match="truncated JPEG"):
        read_size(forged)


def test_png_with_repeated_or_inflating_metadata_is_refused():
    from sr.bench.serve import iccp_bomb_png
    from sr.io import MAX_PNG_METADATA, DecodeLimitError

    assert read_image(iccp_bomb_png(1, 2**20)).width == 16  # one profile is fine (here not a valid one)
    with pytest.raises(DecodeLimitError, match="more than one ICC profile"):
        read_size(iccp_bomb_png(1200, 2**20))
    text = zlib.compress(bytes(MAX_PNG_METADATA // 4))
    chunk = b"zTXtkey\x00\x00" + text
    ztxt = struct.pack(">I", len(chunk) - 4) + chunk + struct.pack(">I", zlib.crc32(chunk))
    png = save(Image.new("RGB", (8, 8)), "PNG")
    with pytest.raises(DecodeLimitError, match="inflates to over"):
        read_image(png[:33] + ztxt * 5 + png[33:])
    read_image(png[:33] + ztxt + png[33:])  # under the bound


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
    # Pillow's PNG getexif() decodes the whole image: read_size must not call it (issue 45).
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: the size read is (height, width)
    png = bytearray(save(Image.new("RGB", (50, 30), (9, 99, 199)), "PNG", exif=exif))
    idat = png.index(b"IDAT")
    png[idat + 6 : idat + 12] = b"\xff" * 6  # the pixel data no longer inflates
    assert read_size(bytes(png)) == (30, 50)
    with pytest.raises(ImageDecodeError):
        read_image(bytes(png))


def test_multi_page_tiff_is_refused_from_its_directory_chain():
    from sr.io import check_decode_cost

    first, *rest = frames(5)
    data = save(first, "TIFF", save_all=True, append_images=rest)
    with pytest.raises(AnimatedImageError, match="TIFF image with 5 frames"):
        check_decode_cost(data)  # no Pillow: the chain of directories alone
    check_decode_cost(save(first, "TIFF"))  # one page
    for order in ("<", ">"):  # a directory that points back to itself: one page, no endless loop
        looped = (b"II*\x00" if order == "<" else b"MM\x00*") + struct.pack(order + "IH", 8, 0) \
            + struct.pack(order + "I", 8)
        check_decode_cost(looped)


def test_integer_samples_are_kept_and_checked_against_the_bit_depth():
    px8 = np.array([[[0, 128, 255]]], np.uint8)
    img = DecodedImage(px8, alpha=np.array([[200]], np.uint8))
    assert img.pixels is px8 and img.alpha.dtype == np.uint8
    assert DecodedImage(px8.astype(np.uint16) * 257, bit_depth=16).pixels.dtype == np.uint16
    with pytest.raises(ValueError, match="8-bit integer pixels must be uint8, got uint16"):
        DecodedImage(px8.astype(np.uint16))
    with pytest.raises(ValueError, match="alpha must be uint8 samples like the pixels"):
        DecodedImage(px8, alpha=np.ones((1, 1), np.float32))


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


def test_quantize_rounds_clips_and_converts_between_sample_types():
    x = np.array([-1.0, 0.0, 0.5 / 255, 0.51 / 255, 1.0, 2.0, np.nan], np.float32)
    np.testing.assert_array_equal(quantize(x, np.uint8), [0, 0, 0, 1, 255, 255, 0])
    assert quantize(np.array([65535, 0], np.uint16), np.uint8).tolist() == [255, 0]
    with pytest.raises(ValueError, match="samples are uint8 or uint16"):
        quantize(x, np.int32)


def test_png_compressed_itxt_counts_in_the_metadata_limit() -> None:
    # Issue 54, row B: iTXt "Comment\0 \x01 \x00 en\0 \0" + zlib; its stream was read one NUL early.
    from sr.io import DecodeLimitError, check_decode_cost

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (90, 120, 150)).save(buf, format="PNG")
    png = buf.getvalue()
    body = b"Comment\x00\x01\x00en\x00\x00" + zlib.compress(bytes(12 * 2**20), 9)
    chunk = struct.pack(">I", len(body)) + b"iTXt" + body + struct.pack(">I", zlib.crc32(b"iTXt" + body))
    check_decode_cost(png[:33] + chunk * 2 + png[33:])  # 24 MiB: under the 32 MiB bound
    with pytest.raises(DecodeLimitError, match="inflates to over"):
        check_decode_cost(png[:33] + chunk * 3 + png[33:])


def test_jpeg_scan_count_sees_past_junk_bytes_and_fill_as_libjpeg_does() -> None:
    # Issue 54, row A: one junk byte after APP0 ended the walk before the scans.
    from sr.bench.serve import scan_bomb_jpeg
    from sr.io import DecodeLimitError, check_decode_cost

    bomb = scan_bomb_jpeg(64, 200)
    app0_end = 4 + int.from_bytes(bomb[4:6], "big")
    for filler in (b"\x00", b"junk", b"\xff" * 60_000, b"\xff\x00" * 1000):
        with pytest.raises(DecodeLimitError, match="over 100 scans"):
            check_decode_cost(bomb[:app0_end] + filler + bomb[app0_end:])
    ok = scan_bomb_jpeg(64, 0)
    check_decode_cost(ok[:app0_end] + b"\x00" + ok[app0_end:])  # a few scans: fine


def test_jpeg_padding_between_segments_is_walked_in_linear_time_and_bounded() -> None:
    # Issue 54, row E: SOI, 19 MB of fill, then a small valid JPEG. Pillow's header read steps
    # through the fill in Python (14 s); the walk's regex backtracked over it (26 s).
    import time

    from sr.bench.serve import image_bytes
    from sr.io import DecodeLimitError, check_decode_cost
    from sr.io.guards import MAX_JPEG_PADDING

    small = image_bytes(64, "JPEG", 4)
    t0 = time.perf_counter()
    with pytest.raises(DecodeLimitError, match="19,922,944 bytes of padding"):
        check_decode_cost(b"\xff\xd8" + b"\xff" * (19 * 2**20) + small[2:])
    assert time.perf_counter() - t0 < 1.0
    padded = b"\xff\xd8" + b"\xff" * (MAX_JPEG_PADDING - 1) + small[2:]
    check_decode_cost(padded)
    assert read_image(padded).width == 64


def test_tiff_directory_chain_is_walked_only_up_to_its_cap():
    import time

    from sr.io import check_decode_cost
    from sr.io.guards import MAX_TIFF_IFDS

    # ~3 M empty directories chained in 19 MB (issue 54, row E): refused after MAX_TIFF_IFDS steps.
    count = 19 * 2**20 // 6
    chain = b"".join(struct.pack("<HI", 0, 8 + 6 * (i + 1)) for i in range(count - 1))
    chain += struct.pack("<HI", 0, 0)
    data = b"II*\x00" + struct.pack("<I", 8) + chain
    t0 = time.perf_counter()
    with pytest.raises(AnimatedImageError, match=f"TIFF image with over {MAX_TIFF_IFDS} frames"):
        check_decode_cost(data)
    assert time.perf_counter() - t0 < 0.1
    short = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<HI", 0, 14) + struct.pack("<HI", 0, 0)
    with pytest.raises(AnimatedImageError, match="TIFF image with 2 frames"):
        check_decode_cost(short)


def _rle8_bmp(width: int, height: int, stream: bytes) -> bytes:
    """A bottom-up 8-bit BMP with a gray palette and an RLE8 pixel stream."""
    palette = b"".join(bytes((i, i, i, 0)) for i in range(256))
    offset = 14 + 40 + len(palette)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 8, 1, len(stream), 2835, 2835, 256, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(stream), 0, 0, offset) + info + palette + stream


def test_rle8_bmp_with_a_stream_longer_than_its_pixels_need_is_refused_before_decoding():
    from sr.io import DecodeLimitError, check_decode_cost

    w, h = 16, 16
    rows = b"".join(bytes((w, 10 * y)) + b"\x00\x00" for y in range(h))  # one run per row, end of line
    img = read_image(_rle8_bmp(w, h, rows + b"\x00\x01"))
    assert (img.width, img.height, img.format) == (w, h, "BMP")
    # The worst an encoder writes: every pixel its own run of one (2 bytes a pixel): still read.
    ones = b"".join(b"".join(bytes((1, x * 16)) for x in range(w)) + b"\x00\x00" for _ in range(h))
    assert read_image(_rle8_bmp(w, h, ones + b"\x00\x01")).width == w
    # Escapes that draw nothing (an end of line at a line's start), 200,000 of them before the pixels.
    bomb = _rle8_bmp(w, h, b"\x00\x00" * 200_000 + rows + b"\x00\x01")
    with pytest.raises(DecodeLimitError, match=r"RLE8 BMP whose compressed stream \(400,"):
        check_decode_cost(bomb)
    with pytest.raises(DecodeLimitError):
        read_size(bomb)
