"""sr.io.guards: decode-cost limits decided from a file's structure before any pixel is decoded.

Every image is made here (numpy/PIL/tifffile). Any warning that leaks out of sr.io fails the test.
"""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

from sr.io import (
    AnimatedImageError,
    ImageDecodeError,
    read_image,
    read_size,
)
from tests.io.images import frames, save

pytestmark = pytest.mark.filterwarnings("error")


def test_progressive_jpeg_scan_bomb_is_refused_from_its_structure():
    from benchmarks.serve import scan_bomb_jpeg
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
    from benchmarks.serve import iccp_bomb_png
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


def test_png_compressed_itxt_counts_in_the_metadata_limit() -> None:
    # A compressed iTXt: "Comment\0 \x01 \x00 en\0 \0" + zlib; its stream was read one NUL early.
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
    # One junk byte after APP0 once ended the walk before the scans.
    from benchmarks.serve import scan_bomb_jpeg
    from sr.io import DecodeLimitError, check_decode_cost

    bomb = scan_bomb_jpeg(64, 200)
    app0_end = 4 + int.from_bytes(bomb[4:6], "big")
    for filler in (b"\x00", b"junk", b"\xff" * 60_000, b"\xff\x00" * 1000):
        with pytest.raises(DecodeLimitError, match="over 100 scans"):
            check_decode_cost(bomb[:app0_end] + filler + bomb[app0_end:])
    ok = scan_bomb_jpeg(64, 0)
    check_decode_cost(ok[:app0_end] + b"\x00" + ok[app0_end:])  # a few scans: fine


def test_jpeg_padding_between_segments_is_walked_in_linear_time_and_bounded() -> None:
    # SOI, 19 MB of fill, then a small valid JPEG. Pillow's header read steps
    # through the fill in Python (14 s); the walk's regex backtracked over it (26 s).
    import time

    from benchmarks.serve import image_bytes
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

    # ~3 M empty directories chained in 19 MB: refused after MAX_TIFF_IFDS steps.
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
