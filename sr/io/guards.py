"""Decode-cost guards: limits checked on the raw bytes before Pillow sees them.

A few KB of hostile input can otherwise buy minutes of uninterruptible decoding (scan bombs,
zlib bombs in metadata, thousands of frames or pages).
"""

from __future__ import annotations

import re
import struct
import zlib

from .errors import AnimatedImageError, DecodeLimitError, ImageDecodeError
from .formats import PNG_MAGIC

DEFAULT_MAX_PIXELS = 64 * 2**20
# Largest decompressed PNG metadata chunk (ICC profile, text). Pillow's own limit is 1 MiB, below
# some real printer/LUT ICC profiles; 16 MiB still bounds a zlib bomb hidden in metadata.
MAX_PNG_CHUNK = 16 * 2**20
# Decode-cost bounds, checked on the raw bytes before Pillow sees them (issue 45): a few KB can
# otherwise buy minutes of uninterruptible decoding. Each scan of a progressive JPEG is a full pass
# over the image (~24 ms at 16 MP on 2 CPU cores); encoders write 6-10 (libjpeg) to ~20 (tuned
# scan scripts), so 100 bounds a 16 MP decode at a few seconds instead of hours.
MAX_JPEG_SCANS = 100
# PNG: the spec allows one iCCP; all compressed metadata (iCCP, zTXt, compressed iTXt) together may
# inflate to this much (one 16 MiB profile fits; 1200 of them, 13 s of inflating, do not); the
# chunk count bounds Pillow's per-chunk Python loop.
MAX_PNG_METADATA = 2 * MAX_PNG_CHUNK
MAX_PNG_CHUNKS = 100_000
# TIFF: image file directories walked to count pages. One page is read; past it the file is refused
# anyway, so the walk stops here instead of following a chain of ~1.5 M tiny directories through a
# 19 MB upload (issue 54, row E: 5.3 s and 322 MB per request before the 415).
MAX_TIFF_IFDS = 64
# BMP RLE8/RLE4: an honest encoder spends at most 2 bytes per pixel (a run of one pixel), 2 per row
# (end of line) and 2 at the end; Pillow decodes RLE in a Python loop, one step per 2 bytes, so
# escapes that draw nothing (a 16x16 image carrying 9.5 M of them held a worker 7.6 s, row E) are
# refused by the stream's length.
BMP_RLE_BYTES_PER_PIXEL = 2
BMP_RLE_SLACK_BYTES = 4096


def check_decode_cost(data: bytes, path: str | None = None) -> None:
    """Refuse, from the raw bytes alone, files whose decode would cost far more than their pixels.

    A pure-Python walk of the file's structure (no inflating of pixel data, no Pillow): JPEG scans
    (progressive scan bombs) and entropy data too short for the declared size (a 3 KB file claiming
    16 MP); PNG chunk count, repeated iCCP and inflated metadata size (zlib bombs in metadata); GIF
    frames (Pillow decodes every frame just to count them) and TIFF pages (animated and multi-page
    images are refused anyway; the directory chain is walked no further than :data:`MAX_TIFF_IFDS`);
    BMP run-length streams longer than their pixels can need.
    Raises :class:`DecodeLimitError`, :class:`AnimatedImageError` or :class:`ImageDecodeError`.
    """
    try:
        if data.startswith(b"\xff\xd8"):
            _check_jpeg(data, path)
        elif data.startswith(PNG_MAGIC):
            _check_png(data, path)
        elif data[:6] in (b"GIF87a", b"GIF89a"):
            _check_gif(data, path)
        elif data[:4] in (b"II*\x00", b"MM\x00*"):
            _check_tiff(data, path)
        elif data[:2] == b"BM":
            _check_bmp(data, path)
    except (IndexError, struct.error):
        return  # a structure we cannot walk: Pillow gives the precise error for it


# JPEG markers with no length field: SOI, EOI, RSTn, TEM.
_JPEG_BARE = frozenset({0xD8, 0xD9, 0x01, *range(0xD0, 0xD8)})
# Frame headers of Huffman-coded JPEGs (baseline, extended, progressive): every 8x8 block of those
# takes at least one bit (its DC code).
_JPEG_HUFFMAN_SOF = frozenset({0xC0, 0xC1, 0xC2})
# The next marker after entropy-coded data: 0xFF not followed by a stuffed 0x00, RSTn or fill 0xFF.
_JPEG_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
# Between segments, libjpeg's next_marker() skips any bytes that are not 0xFF ("extraneous bytes"),
# then fill 0xFFs, and takes the next byte as the marker (0x00 after 0xFF is no marker: it goes on).
# The walk must skip the same bytes: stopping at the first junk byte let a 20,000-scan JPEG past
# the scan count (issue 54, row A). It skips them with find() and a one-byte class, linear in the
# bytes: a regex of "0xFF run, then a marker byte" backtracked over each start of a 19 MB fill run
# (26 s, row E).
_NOT_FF = re.compile(rb"[^\xff]")
# Pillow's header read steps through those bytes one at a time in Python (19 MB of fill: 14 s);
# encoders write none or a few, so more than this between two segments is refused.
MAX_JPEG_PADDING = 64 * 1024


def _jpeg_marker_at_or_after(data: bytes, pos: int) -> int:
    """Where the next marker's 0xFF is, skipping junk and fill as libjpeg does; -1 if none."""
    while True:
        ff = data.find(b"\xff", pos)
        if ff < 0:
            return -1
        after = _NOT_FF.search(data, ff)  # the first byte after the run of 0xFF
        if after is None:
            return -1
        if data[after.start()] != 0x00:
            return after.start() - 1
        pos = after.start() + 1  # 0xFF 0x00 outside a scan: junk too


def _check_jpeg(data: bytes, path: str | None) -> None:
    pos, scans, entropy, blocks = 2, 0, 0, 0
    while pos + 4 <= len(data):
        if data[pos] != 0xFF or data[pos + 1] in (0x00, 0xFF):  # junk or fill: skip as libjpeg does
            found = _jpeg_marker_at_or_after(data, pos)
            if found < 0:
                break
            if found - pos > MAX_JPEG_PADDING:
                raise DecodeLimitError(
                    f"JPEG with {found - pos:,} bytes of padding between two segments (encoders write "
                    "a few); reading it would take seconds", path)
            pos = found
            continue
        marker = data[pos + 1]
        if marker == 0xD9:  # EOI: the end of the first image (MPO frames after it are not decoded)
            break
        if marker in _JPEG_BARE:
            pos += 2
            continue
        length = struct.unpack_from(">H", data, pos + 2)[0]
        if marker in _JPEG_HUFFMAN_SOF:  # arithmetic coding can spend under a bit per block
            h, w = struct.unpack_from(">HH", data, pos + 5)
            blocks = -(-h // 8) * -(-w // 8)  # of the first component at least
        pos += 2 + length
        if marker == 0xDA:  # SOS: entropy-coded data follows, up to the next real marker
            scans += 1
            if scans > MAX_JPEG_SCANS:
                raise DecodeLimitError(
                    f"JPEG with over {MAX_JPEG_SCANS} scans (progressive images have about 10); "
                    "decoding it would take minutes", path)
            found = _JPEG_NEXT_MARKER.search(data, pos)
            end = found.start() if found else len(data)
            entropy += end - pos
            pos = end
    if blocks and entropy * 8 < blocks:
        raise ImageDecodeError(
            f"truncated JPEG: its header declares {blocks:,} blocks of 8x8 pixels but it carries only "
            f"{entropy:,} bytes of image data", path)


def _check_png(data: bytes, path: str | None) -> None:
    pos, chunks, iccp, inflated = 8, 0, 0, 0
    while pos + 8 <= len(data):
        length, tag = struct.unpack_from(">I4s", data, pos)
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        chunks += 1
        if chunks > MAX_PNG_CHUNKS:
            raise DecodeLimitError(f"PNG with over {MAX_PNG_CHUNKS:,} chunks", path)
        if tag == b"IEND":
            break
        if tag == b"iCCP":
            iccp += 1
            if iccp > 1:
                raise DecodeLimitError("PNG with more than one ICC profile (iCCP chunk)", path)
        compressed = _png_compressed_metadata(tag, body)
        if compressed is not None:
            inflated += _inflated_size(compressed, MAX_PNG_METADATA - inflated + 1)
            if inflated > MAX_PNG_METADATA:
                raise DecodeLimitError(
                    f"PNG metadata (ICC profile and text) inflates to over {MAX_PNG_METADATA // 2**20} MiB",
                    path)


def _png_compressed_metadata(tag: bytes, body: bytes) -> bytes | None:
    """The zlib stream of an iCCP, zTXt or compressed iTXt chunk, else None."""
    if tag not in (b"iCCP", b"zTXt", b"iTXt"):
        return None
    name_end = body.find(b"\x00")
    if name_end < 0:
        return None
    if tag == b"iTXt":  # keyword, 0, compression flag, method, language, 0, translated keyword, 0, text
        if body[name_end + 1 : name_end + 2] != b"\x01":
            return None
        # The method byte is usually 0, so splitting the body on NULs took it for the end of the
        # language and read the stream one NUL early: 0 bytes counted (issue 54, row B).
        language_end = body.find(b"\x00", name_end + 3)
        translated_end = body.find(b"\x00", language_end + 1) if language_end >= 0 else -1
        return body[translated_end + 1 :] if translated_end >= 0 else None
    return body[name_end + 2 :]  # keyword, 0, compression method, stream


# Inflated in small steps: pieces under glibc's mmap threshold are reused from the heap, where 1 MiB
# pieces grew each thread's arena by tens of MB for good (seen as RSS steps under iCCP bombs).
_INFLATE_STEP = 64 * 1024


def _inflated_size(stream: bytes, limit: int) -> int:
    """Bytes ``stream`` inflates to, counting no further than ``limit`` (a bomb is not inflated whole)."""
    inflater = zlib.decompressobj()
    total = 0
    try:
        chunk = inflater.decompress(stream, _INFLATE_STEP)
        while chunk and total <= limit:
            total += len(chunk)
            chunk = inflater.decompress(inflater.unconsumed_tail, _INFLATE_STEP)
    except zlib.error:
        pass  # corrupt metadata: Pillow ignores or reports it
    return total


def _check_gif(data: bytes, path: str | None) -> None:
    pos = 13 + ((3 << ((data[10] & 7) + 1)) if data[10] & 0x80 else 0)  # header, screen, global colours
    frames = 0
    while pos < len(data) and data[pos] != 0x3B:  # up to the trailer
        kind = data[pos]
        if kind == 0x2C:  # image descriptor: 9 bytes, local colour table, LZW code size, sub-blocks
            frames += 1
            flags = data[pos + 9]
            pos += 10 + ((3 << ((flags & 7) + 1)) if flags & 0x80 else 0) + 1
        elif kind == 0x21:  # extension: label, then sub-blocks
            pos += 2
        else:
            break  # corrupt: Pillow says how
        while pos < len(data) and data[pos]:  # sub-blocks, up to the zero-length terminator
            pos += data[pos] + 1
        pos += 1
    if frames > 1:
        raise AnimatedImageError(
            f"GIF image with {frames} frames (animated or multi-page images are not supported)", path)


def _check_tiff(data: bytes, path: str | None) -> None:
    """Pages, counted along the chain of image file directories (Pillow reads each one's tags to
    count them: a 20 MB file of tiny directories is ~100,000 pages of Python work), up to
    :data:`MAX_TIFF_IFDS` of them."""
    order = "<" if data[:2] == b"II" else ">"
    offset, pages, seen = struct.unpack_from(order + "I", data, 4)[0], 0, set()
    while offset and offset not in seen and offset + 2 <= len(data) and pages <= MAX_TIFF_IFDS:
        seen.add(offset)
        pages += 1
        entries = struct.unpack_from(order + "H", data, offset)[0]
        offset = struct.unpack_from(order + "I", data, offset + 2 + 12 * entries)[0]
    if pages > 1:
        count = f"over {MAX_TIFF_IFDS}" if pages > MAX_TIFF_IFDS else str(pages)
        raise AnimatedImageError(
            f"TIFF image with {count} frames (animated or multi-page images are not supported)", path)


_BMP_RLE = {1: "RLE8", 2: "RLE4"}


def _check_bmp(data: bytes, path: str | None) -> None:
    """A run-length BMP whose compressed stream is longer than any encoder writes for its pixels."""
    offset, header = struct.unpack_from("<I", data, 10)[0], struct.unpack_from("<I", data, 14)[0]
    if header < 40:  # OS/2 core header: no compression field, no RLE
        return
    width, height = struct.unpack_from("<ii", data, 18)
    compression = struct.unpack_from("<I", data, 30)[0]
    if compression not in _BMP_RLE:
        return
    rows = abs(height)
    need = BMP_RLE_BYTES_PER_PIXEL * abs(width) * rows + 2 * rows + BMP_RLE_SLACK_BYTES
    stream = len(data) - offset
    if stream > need:
        raise DecodeLimitError(
            f"{_BMP_RLE[compression]} BMP whose compressed stream ({stream:,} bytes) is longer than its "
            f"{abs(width)}x{rows} pixels can need ({need:,} at most); decoding it would take a long time",
            path)
