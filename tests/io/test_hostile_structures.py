"""Every chainable structure Pillow would walk is counted by sr.io first, for every magic
number Pillow accepts; PNM's header and comments are bounded; whatever Pillow raises on a bad file
is a typed ImageError with a true reason.

The bombs are small versions of the real ones (the walk's decision does not depend on the size);
"before any decode" is asserted by a Pillow that fails the test if it is asked to open the file.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable

import numpy as np
import pytest
from PIL import Image

from sr.io import (
    AnimatedImageError,
    DecodeLimitError,
    ImageDecodeError,
    ImageTooLargeError,
    UnsupportedFormatError,
    UnsupportedModeError,
    check_decode_cost,
    read_image,
    read_size,
    upload_formats,
)
from sr.io.formats import TIFF_MAGIC, sniff
from sr.io.guards import (
    MAX_GIF_BLOCKS,
    MAX_GIF_JUNK,
    MAX_PNM_DATA_COMMENTS,
    MAX_PNM_HEADER,
    MAX_TIFF_IFDS,
    MAX_TIFF_STRIPS,
    MAX_TIFF_TAGS,
    MAX_WEBP_CHUNKS,
)
from tests.io.images import frames, save

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture
def no_pillow(monkeypatch: pytest.MonkeyPatch) -> Callable[[bytes], Exception]:
    """refused(data) -> the ImageError read_image raises for ``data`` without Pillow opening it."""

    def opened(*args: object, **kwargs: object) -> None:
        raise AssertionError("Pillow was asked to open a file the walk should have refused")

    def refused(data: bytes, **kwargs: object) -> Exception:
        with monkeypatch.context() as m:
            m.setattr("PIL.Image.open", opened)
            with pytest.raises((DecodeLimitError, AnimatedImageError, ImageDecodeError)) as caught:
                read_image(data, **kwargs)  # type: ignore[arg-type]
        return caught.value

    return refused


# --- PNM: header and comment sizes ----------------------------------------------------------------


def test_plain_pnm_comments_in_the_pixel_data_are_counted_before_pillow(no_pillow) -> None:
    # The real one: b"P1\n8 8\n" + b"#\n" * 10_000_000 + 64 bytes held a worker 61 s.
    bomb = b"P1\n8 8\n" + b"#\n" * 10_000 + b"01" * 32
    error = no_pillow(bomb)
    assert isinstance(error, DecodeLimitError)
    assert str(error) == ("plain PNM with 10,000 comments in its pixel data (over 64; writers put none "
                          "there); decoding it would take minutes")
    fine = b"P1\n8 8\n" + b"#\n" * MAX_PNM_DATA_COMMENTS + b"01" * 32
    assert read_image(fine).pixels.shape == (8, 8, 1)
    # Raw (P4-P6) pixel data is binary: a 0x23 byte there is a pixel, not a comment.
    raw = b"P5\n8 8\n255\n" + b"#" * 64
    assert read_image(raw).pixels.min() == pytest.approx(0x23 / 255)


def test_pnm_header_longer_than_its_bound_is_refused_before_pillow(no_pillow) -> None:
    # Pillow reads the header one byte per Python step: a 19 MB comment there is 19 M steps.
    for head in (b"P5\n#" + b"x" * MAX_PNM_HEADER + b"\n8 8\n255\n",
                 b"P5\n8" + b" " * MAX_PNM_HEADER + b"8\n255\n",
                 b"P3\n8 8\n" + b"# GIMP\n" * (MAX_PNM_HEADER // 7 + 1) + b"255\n"):
        error = no_pillow(head + bytes(192))
        assert isinstance(error, DecodeLimitError) and "PNM header" in str(error)
    gimp = b"P6\n# Created by GIMP version 2.10.34 PNM plug-in\n8 8\n255\n" + bytes(192)
    assert read_image(gimp).pixels.shape == (8, 8, 3)


def test_a_format_the_caller_does_not_accept_is_refused_before_any_parsing(no_pillow) -> None:
    pnm = b"P5\n#" + b"x" * 100_000 + b"\n8 8\n255\n" + bytes(64)  # would be a header bomb too
    for read in (read_image, read_size):
        with pytest.raises(UnsupportedFormatError) as caught:
            read(pnm, formats=upload_formats())
        assert caught.value.format == "PPM"
        assert str(caught.value) == ("PPM images are not accepted here "
                                     "(accepted: PNG, JPEG, WEBP, BMP, TIFF, GIF, AVIF)")
    # An accepted format reads as before; something unknown names the accepted list.
    png = save(Image.new("RGB", (5, 4)), "PNG")
    assert read_size(png, formats=upload_formats()) == (5, 4)
    accepted = r"not a supported format \(PNG, JPEG, WEBP, BMP, TIFF, GIF, AVIF\)"
    with pytest.raises(ImageDecodeError, match=accepted):
        read_image(b"GIF90a not quite" * 4, formats=upload_formats())


# --- TIFF: every header Pillow opens --------------------------------------------------------------


def _chain(magic: bytes, pages: int) -> bytes:
    """``pages`` empty directories chained one after another, in the layout Pillow reads ``magic`` with."""
    order = "<" if magic[:2] == b"II" else ">"
    if magic[2] == 0x2B:  # BigTIFF: 8-byte entry count and offsets
        dirs = b"".join(struct.pack(order + "QQ", 0, 16 + 16 * (i + 1) if i + 1 < pages else 0)
                        for i in range(pages))
        return magic + struct.pack(order + "HHQ", 8, 0, 16) + dirs
    dirs = b"".join(struct.pack(order + "HI", 0, 8 + 6 * (i + 1) if i + 1 < pages else 0)
                    for i in range(pages))
    return magic + struct.pack(order + "I", 8) + dirs


@pytest.mark.parametrize("magic", TIFF_MAGIC)
def test_tiff_pages_are_counted_for_every_header_pillow_opens(magic: bytes, no_pillow) -> None:
    # Walking only II*\0 and MM\0* let a 170k-directory chain behind II\0* hold a worker 61 s.
    assert sniff(magic + bytes(12)).name == "tiff"
    error = no_pillow(_chain(magic, 100_000))
    assert isinstance(error, AnimatedImageError)
    assert str(error) == (f"TIFF image with over {MAX_TIFF_IFDS} frames "
                          "(animated or multi-page images are not supported)")
    with pytest.raises(AnimatedImageError, match="TIFF image with 2 frames"):
        check_decode_cost(_chain(magic, 2))
    check_decode_cost(_chain(magic, 1))


@pytest.mark.parametrize("magic", [b"II\x00*", b"II+\x00"])
def test_the_walk_reads_a_real_two_page_tiff_as_pillow_does(magic: bytes) -> None:
    first, second = frames(2)
    data = save(first, "TIFF", save_all=True, append_images=[second], big_tiff=magic[2] == 0x2B)
    data = magic + data[4:]  # the version bytes swapped: Pillow still opens it, little-endian
    assert Image.open(io.BytesIO(data)).n_frames == 2
    with pytest.raises(AnimatedImageError, match="TIFF image with 2 frames"):
        check_decode_cost(data)


def _strips_tiff(width: int, height: int) -> bytes:
    """8-bit gray, one row per strip."""
    entries = [(256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
               (273, 4, height, None), (278, 4, 1, 1), (279, 4, height, None)]
    offsets_at = 8 + 2 + 12 * len(entries) + 4
    counts_at = offsets_at + 4 * height
    pixels_at = counts_at + 4 * height
    out = {273: offsets_at, 279: counts_at}
    ifd = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<HHII", tag, kind, count, out.get(tag, value)) for tag, kind, count, value in entries)
    ifd += struct.pack("<I", 0)
    offsets = struct.pack(f"<{height}I", *(pixels_at + i * width for i in range(height)))
    counts = struct.pack(f"<{height}I", *([width] * height))
    return b"II*\x00" + struct.pack("<I", 8) + ifd + offsets + counts + bytes(width * height)


def test_tiff_strips_are_counted_before_pillow_sets_each_up(no_pillow) -> None:
    # 1 M one-row strips in 4 MB preview in 8.45 s; here just over the bound.
    error = no_pillow(_strips_tiff(1, MAX_TIFF_STRIPS + 1))
    assert isinstance(error, DecodeLimitError) and "TIFF with 65,537 strips (over 65,536" in str(error)
    check_decode_cost(_strips_tiff(1, MAX_TIFF_STRIPS))
    assert read_image(_strips_tiff(3, 40)).pixels.shape == (40, 3, 1)


def test_tiff_directory_entries_are_bounded_for_classic_and_big_tiff(no_pillow) -> None:
    n = MAX_TIFF_TAGS + 1
    classic = b"II*\x00" + struct.pack("<IH", 8, n) + struct.pack("<HHII", 999, 3, 1, 0) * n + bytes(4)
    assert "TIFF image directory with 1,025 entries" in str(no_pillow(classic))
    # BigTIFF declares its count in 8 bytes: what the file holds is what Pillow would loop over.
    big = b"II+\x00" + struct.pack("<HHQQ", 8, 0, 16, 2**60) + struct.pack("<HHQQ", 999, 3, 1, 0) * n
    assert "TIFF image directory with 1,025 entries" in str(no_pillow(big))


def test_a_tiff_directory_past_the_end_is_truncated_not_a_crash(no_pillow) -> None:
    # The next directory's offset past the end makes Pillow raise TypeError
    # ("Missing dimensions") while counting pages, which would kill the service's decoder child.
    data = bytearray(save(Image.new("L", (4, 4)), "TIFF"))
    ifd = struct.unpack_from("<I", data, 4)[0]
    struct.pack_into("<I", data, ifd + 2 + 12 * struct.unpack_from("<H", data, ifd)[0], 10_000)
    error = no_pillow(bytes(data))
    assert type(error) is ImageDecodeError
    assert str(error) == (f"truncated TIFF: image directory 2 is at byte 10,000, past the end of the file "
                          f"({len(data)} bytes)")


def test_any_exception_pillow_raises_on_a_file_is_a_decode_error() -> None:
    # An XMP tag (700) holding a number: Pillow's getexif() raises TypeError when the pixels load.
    entries = [(256, 4, 4), (257, 4, 4), (258, 3, 8), (262, 3, 1), (273, 4, 8 + 2 + 12 * 7 + 4),
               (279, 4, 16), (700, 3, 7)]
    data = b"II*\x00" + struct.pack("<IH", 8, len(entries)) + b"".join(
        struct.pack("<HHII", tag, kind, 1, value) for tag, kind, value in entries) + bytes(4) + bytes(16)
    with pytest.raises(TypeError):
        Image.open(io.BytesIO(data)).load()
    assert read_size(data) == (4, 4)
    with pytest.raises(ImageDecodeError, match=r"^truncated or corrupt image data \(expected string"):
        read_image(data)


def _float_rgb_tiff(w: int = 4, h: int = 3) -> bytes:
    """A valid RGB TIFF of 32-bit float samples (SampleFormat 3): Pillow has no mode for it."""
    entries = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, 3, "bits"), (259, 3, 1, 1), (262, 3, 1, 2),
               (273, 4, 1, "pixels"), (277, 3, 1, 3), (278, 4, 1, h), (279, 4, 1, w * h * 12),
               (339, 3, 3, "formats")]
    at = {"bits": 8 + 2 + 12 * len(entries) + 4}
    at["formats"] = at["bits"] + 6
    at["pixels"] = at["formats"] + 6
    ifd = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<HHIHH", tag, kind, count, value, 0) if kind == 3 and count == 1
        else struct.pack("<HHII", tag, kind, count, at.get(value, value))  # type: ignore[call-overload]
        for tag, kind, count, value in entries) + struct.pack("<I", 0)
    pixels = np.linspace(0, 1, w * h * 3, dtype="<f4").tobytes()
    return b"II*\x00" + struct.pack("<I", 8) + ifd + struct.pack("<6H", 32, 32, 32, 3, 3, 3) + pixels


def test_a_valid_float_rgb_tiff_is_an_unsupported_mode_named_by_its_samples() -> None:
    # Not 400 "corrupt": Pillow's open says only "cannot identify", which hides the real reason.
    with pytest.raises(UnsupportedModeError) as caught:
        read_image(_float_rgb_tiff())
    assert caught.value.mode == "3 samples of 32-bit floating point"
    with pytest.raises(UnsupportedModeError, match="unsupported pixel mode F"):  # float gray: Pillow's F
        read_image(save(Image.fromarray(np.ones((3, 4), np.float32)), "TIFF"))
    damaged = _float_rgb_tiff()[:8] + b"\xff" * 40  # not a valid directory: still corrupt, not a mode
    with pytest.raises(ImageDecodeError) as caught_damaged:
        read_image(damaged)
    assert not isinstance(caught_damaged.value, UnsupportedModeError)


# --- GIF, WebP, APNG frames ----------------------------------------------------------------------


def _gif_blocks_start(gif: bytes) -> int:
    return 13 + ((3 << ((gif[10] & 7) + 1)) if gif[10] & 0x80 else 0)


def test_gif_frames_are_counted_past_stray_bytes_as_pillow_skips_them(no_pillow) -> None:
    # One junk byte must not end the walk: Pillow skips it and counts the frames (2.2 s).
    first, *rest = frames(5)
    gif = save(first, "GIF", save_all=True, append_images=rest)
    start = _gif_blocks_start(gif)
    junked = gif[:start] + b"\x00" + gif[start:]
    assert Image.open(io.BytesIO(junked)).n_frames == 5  # Pillow reads past it
    error = no_pillow(junked)
    assert str(error) == "GIF image with 5 frames (animated or multi-page images are not supported)"
    error = no_pillow(gif[:start] + b"\x00" * (MAX_GIF_JUNK + 1) + gif[start:])
    assert isinstance(error, DecodeLimitError) and "over 65,536 stray bytes" in str(error)
    still = save(first, "GIF")
    start = _gif_blocks_start(still)
    assert read_image(still[:start] + b"\x00" * 100 + still[start:]).pixels.shape == (8, 8, 3)


def test_gif_sub_blocks_are_bounded(no_pillow) -> None:
    # A comment extension of 1-byte sub-blocks: Pillow gathers them one per Python step.
    still = save(frames(1)[0], "GIF")
    start = _gif_blocks_start(still)
    comment = b"!\xfe" + b"\x01c" * (MAX_GIF_BLOCKS + 1) + b"\x00"
    error = no_pillow(still[:start] + comment + still[start:])
    assert isinstance(error, DecodeLimitError) and "over 262,144 data sub-blocks" in str(error)


def test_webp_and_apng_frames_are_counted_before_pillow(no_pillow) -> None:
    first, *rest = frames(3)
    for fmt in ("WEBP", "PNG"):
        animated = save(first, fmt, save_all=True, append_images=rest)
        error = no_pillow(animated)
        assert str(error) == f"{fmt} image with 3 frames (animated or multi-page images are not supported)"
        assert read_image(save(first, fmt)).pixels.shape == (8, 8, 3)
    still = save(first, "WEBP")
    riff = still[12:]
    padded = b"RIFF" + struct.pack("<I", 4 + len(riff) + 8 * MAX_WEBP_CHUNKS) + b"WEBP" + riff \
        + b"JUNK\x00\x00\x00\x00" * MAX_WEBP_CHUNKS
    assert "WebP with over 1,024 chunks" in str(no_pillow(padded))


def test_an_apng_frame_count_past_one_is_refused_from_its_control_chunks() -> None:
    png = save(Image.new("RGB", (4, 4)), "PNG")

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    fctl = chunk(b"fcTL", struct.pack(">IIIIIHHBB", 0, 4, 4, 0, 0, 1, 1, 0, 0))
    one = png[:33] + chunk(b"acTL", struct.pack(">II", 1, 0)) + fctl + png[33:]
    assert read_image(one).pixels.shape == (4, 4, 3)  # an APNG of one frame is a still image
    with pytest.raises(AnimatedImageError, match="PNG image with 2 frames"):
        check_decode_cost(png[:33] + chunk(b"acTL", struct.pack(">II", 1, 0)) + fctl * 2 + png[33:])


# --- pixel limits in sr's words --------------------------------------------------------------------


def test_over_pillows_own_bomb_limit_the_callers_limit_is_quoted() -> None:
    # Over 178,956,970 pixels Pillow refuses at its header read, with its own text.
    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    header = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20_000, 9_000, 8, 2, 0, 0, 0))
    for read in (read_image, read_size):
        with pytest.raises(ImageTooLargeError) as caught:
            read(header + chunk(b"IEND", b""), max_pixels=16 * 2**20)
        assert str(caught.value) == "180,000,000 pixels, over the limit of 16,777,216"


def test_sniff_claims_only_what_pillow_would_open_as_that_format() -> None:
    from sr.io import looks_like_image

    assert sniff(b"\x00\x00\x00\x1cftypavif" + bytes(8)).name == "avif"
    # HEIC and other HEIF files: Pillow's AVIF plugin tries the generic brands, but a failure to
    # decode one is "not a supported format" (415), not a damaged image (400).
    for brand in (b"heic", b"mif1", b"msf1"):
        assert not looks_like_image(b"\x00\x00\x00\x1cftyp" + brand + bytes(8))
    assert sniff(b"P6\n8 8\n255\n").name == "ppm" and sniff(b"P0CMYK 8 8").name == "ppm"
    assert sniff(b"Python is not a PNM") is None and sniff(b"P7\nWIDTH 8") is None  # PAM: not Pillow's
    assert not looks_like_image(b"P6\n8 8\n255\n", formats=upload_formats())


def test_a_short_or_cut_structure_does_not_end_the_count_early() -> None:
    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    png = save(Image.new("RGB", (4, 4)), "PNG")
    iccp = chunk(b"iCCP", b"icc\x00\x00" + zlib.compress(b"profile"))
    with pytest.raises(DecodeLimitError, match="more than one ICC profile"):  # past an empty acTL
        check_decode_cost(png[:33] + chunk(b"acTL", b"") + iccp * 2 + png[33:])
    first, *rest = frames(4)
    gif = save(first, "GIF", save_all=True, append_images=rest)
    last = gif.rindex(b"\x2c\x00\x00\x00\x00")  # the fourth image descriptor, cut in the middle
    with pytest.raises(AnimatedImageError, match="GIF image with 3 frames"):
        check_decode_cost(gif[: last + 5])
