"""sr.io.png_chunks: a PNG's chunk walk, its stored size, and an eXIf orientation after the pixel data."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

from sr.io.png_chunks import PngChunk, late_exif_orientation, png_chunks, stored_size


def _chunk(tag: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))


def _png(w: int, h: int, **save: object) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (90, 120, 150)).save(buf, "PNG", **save)
    return buf.getvalue()


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()[6:]  # without the "Exif\0\0" header, as PNG stores it


def _with_late(png: bytes, *chunks: bytes) -> bytes:
    return png[:-12] + b"".join(chunks) + png[-12:]  # after IDAT, before IEND


def test_chunks_are_listed_in_order_with_their_data() -> None:
    png = _png(7, 5)
    chunks = list(png_chunks(png))
    assert [c.tag for c in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    assert chunks[0] == PngChunk(b"IHDR", 16, 13)
    assert chunks[0].data(png)[:8] == struct.pack(">II", 7, 5)
    assert chunks[-1].length == 0


def test_the_walk_stops_at_iend_and_at_the_end_of_the_bytes() -> None:
    png = _png(4, 4)
    after_iend = png + _chunk(b"tEXt", b"k\0v")
    assert [c.tag for c in png_chunks(after_iend)][-1] == b"IEND"
    truncated = png[:45]  # IHDR whole (33 bytes in), then only the head of IDAT
    assert [c.tag for c in png_chunks(truncated)] == [b"IHDR", b"IDAT"]
    assert list(png_chunks(b"GIF89a not a png")) == []


def test_stored_size_is_the_ihdrs_before_any_orientation() -> None:
    assert stored_size(_png(600, 40)) == (600, 40)
    assert stored_size(_with_late(_png(600, 40), _chunk(b"eXIf", _exif(6)))) == (600, 40)
    assert stored_size(_png(3, 2)[:20]) is None
    assert stored_size(b"\xff\xd8\xff not a png at all, but long enough") is None


def test_late_exif_orientation_is_read_only_after_the_pixel_data() -> None:
    assert late_exif_orientation(_with_late(_png(600, 40), _chunk(b"eXIf", _exif(6)))) == 6
    with_header = _chunk(b"eXIf", b"Exif\x00\x00" + _exif(8))
    assert late_exif_orientation(_with_late(_png(9, 9), with_header)) == 8
    # the last of two late chunks, as the decoder reads it
    assert late_exif_orientation(_with_late(_png(9, 9), _chunk(b"eXIf", _exif(6)),
                                            _chunk(b"eXIf", _exif(3)))) == 3
    exif = Image.Exif()
    exif[0x0112] = 6
    early = _png(600, 40, exif=exif)  # Pillow writes eXIf before IDAT: the header read sees it
    assert b"eXIf" in early and late_exif_orientation(early) is None
    assert late_exif_orientation(_png(9, 9)) is None


def test_unreadable_or_out_of_range_orientations_are_none() -> None:
    assert late_exif_orientation(_with_late(_png(9, 9), _chunk(b"eXIf", b"garbage, not TIFF"))) is None
    assert late_exif_orientation(_with_late(_png(9, 9), _chunk(b"eXIf", _exif(9)))) is None
    assert late_exif_orientation(b"not a png") is None
