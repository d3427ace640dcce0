"""Decode-cost guards: limits checked on the raw bytes before Pillow sees them.

A few KB of hostile input can otherwise buy minutes of uninterruptible decoding (scan bombs,
zlib bombs in metadata, thousands of frames or pages). Every structure that can be chained is
counted here, for every magic number Pillow accepts (:func:`sr.io.formats.sniff`): JPEG scans, PNG
chunks and APNG frames, GIF frames and blocks, WebP chunks and frames, TIFF directories, tags and
strips, PNM headers and comments.
"""

from __future__ import annotations

import re
import struct
import zlib

from . import tiff
from .errors import AnimatedImageError, DecodeLimitError, ImageDecodeError
from .formats import sniff

DEFAULT_MAX_PIXELS = 64 * 2**20
# Largest decompressed PNG metadata chunk (ICC profile, text). Pillow's own limit is 1 MiB, below
# some real printer/LUT ICC profiles; 16 MiB still bounds a zlib bomb hidden in metadata.
MAX_PNG_CHUNK = 16 * 2**20
# Decode-cost bounds, checked on the raw bytes before Pillow sees them: a few KB can
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
# 19 MB upload (5.3 s and 322 MB per request before the 415).
MAX_TIFF_IFDS = 64
# Entries of one directory: Pillow reads each in Python, twice or more per decode (4,000 took
# 0.05 s to open; a BigTIFF directory may declare 2^64). Real files carry a few dozen tags.
MAX_TIFF_TAGS = 1024
# Strips or tiles of the first page: Pillow sets up and decodes each one separately, ~4 us each on
# the 2-core dev machine (a 4 MB file of 1 M one-row strips previewed in 8.45 s); 65,536
# cost ~0.3 s. Encoders write strips of ~8 KB: a 16-MP RGB image has ~6,000.
MAX_TIFF_STRIPS = 65_536
# BMP RLE8/RLE4: an honest encoder spends at most 2 bytes per pixel (a run of one pixel), 2 per row
# (end of line) and 2 at the end; Pillow decodes RLE in a Python loop, one step per 2 bytes, so
# escapes that draw nothing (a 16x16 image carrying 9.5 M of them held a worker 7.6 s) are
# refused by the stream's length.
BMP_RLE_BYTES_PER_PIXEL = 2
BMP_RLE_SLACK_BYTES = 4096
# GIF: Pillow skips a byte that starts no block one at a time in Python, and reads every extension's
# sub-blocks in Python (comments too); encoders write no stray bytes and 255-byte sub-blocks, so a
# 20 MB GIF has ~80,000 of them. The walk counts frames past stray bytes as Pillow does (one junk
# byte used to end it: 2.2 s of frame counting).
MAX_GIF_JUNK = 64 * 1024
MAX_GIF_BLOCKS = 2**18
# WebP: chunks walked to count animation frames (a still image has 1-5 chunks).
MAX_WEBP_CHUNKS = 1024
# PNM (local files only; the service refuses the format): Pillow reads the header (magic, size,
# maxval and the comments between them) one byte per Python step, and takes each comment out of a
# plain (ASCII) file's pixel data by copying the rest of its 1 MiB block (10 M comments: 61 s).
# Writers put one comment line or none in the header, and none in the pixels.
MAX_PNM_HEADER = 64 * 1024
MAX_PNM_DATA_COMMENTS = 64


def check_decode_cost(data: bytes, path: str | None = None) -> None:
    """Refuse, from the raw bytes alone, files whose decode would cost far more than their pixels.

    A pure-Python walk of the file's structure (no inflating of pixel data, no Pillow), for the
    format :func:`~sr.io.formats.sniff` recognizes by any magic number Pillow accepts: JPEG scans
    (progressive scan bombs) and entropy data too short for the declared size (a 3 KB file claiming
    16 MP); PNG chunk count, APNG frames, repeated iCCP and inflated metadata size (zlib bombs in
    metadata); GIF frames (Pillow decodes every frame just to count them), stray bytes and blocks;
    WebP chunks and frames; TIFF pages (animated and multi-page images are refused anyway; the
    directory chain is walked no further than :data:`MAX_TIFF_IFDS`), directory entries and strips;
    BMP run-length streams longer than their pixels can need; PNM header and comment sizes.
    Raises :class:`DecodeLimitError`, :class:`AnimatedImageError` or :class:`ImageDecodeError`.
    """
    row = sniff(data)
    name = row.name if row is not None else ("jpeg" if data.startswith(b"\xff\xd8") else None)
    check = _CHECKS.get(name) if name else None
    if check is None:
        return
    try:
        check(data, path)
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
# the scan count. It skips them with find() and a one-byte class, linear in the
# bytes: a regex of "0xFF run, then a marker byte" backtracked over each start of a 19 MB fill run
# (26 s).
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
    pos, chunks, iccp, inflated, fctl = 8, 0, 0, 0, 0
    while pos + 8 <= len(data):
        length, tag = struct.unpack_from(">I4s", data, pos)
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        chunks += 1
        if chunks > MAX_PNG_CHUNKS:
            raise DecodeLimitError(f"PNG with over {MAX_PNG_CHUNKS:,} chunks", path)
        if tag == b"IEND":
            break
        if tag in (b"acTL", b"fcTL"):  # an animation: frames declared, or frame controls counted
            # (a short acTL must not end the walk with an exception: the chunks after it still count)
            frames = int.from_bytes(body[:4], "big") if tag == b"acTL" else fctl + 1
            fctl += tag == b"fcTL"
            if frames > 1:
                raise AnimatedImageError(
                    f"PNG image with {frames} frames (animated or multi-page images are not supported)", path)
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
        # language and read the stream one NUL early: 0 bytes counted.
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


# Bytes that start a GIF block: an extension, an image, the trailer.
_GIF_BLOCK = re.compile(rb"[!,;]")
MAX_GIF_FRAMES_COUNTED = 64


def _check_gif(data: bytes, path: str | None) -> None:
    """Frames, counted as Pillow's reader finds them: a byte that starts no block is skipped (as
    Pillow does, one at a time), sub-blocks are followed to their terminator."""
    pos = 13 + ((3 << ((data[10] & 7) + 1)) if data[10] & 0x80 else 0)  # header, screen, global colours
    frames = junk = blocks = 0
    # A descriptor cut short ends the walk with the frames counted so far (Pillow stops there too).
    while pos + 10 < len(data) and data[pos] != 0x3B:  # up to the trailer
        kind = data[pos]
        if kind == 0x2C:  # image descriptor: 9 bytes, local colour table, LZW code size, sub-blocks
            frames += 1
            if frames > MAX_GIF_FRAMES_COUNTED:
                break
            flags = data[pos + 9]
            pos += 10 + ((3 << ((flags & 7) + 1)) if flags & 0x80 else 0) + 1
        elif kind == 0x21:  # extension: label, then sub-blocks
            pos += 2
        else:
            found = _GIF_BLOCK.search(data, pos)
            end = found.start() if found else len(data)
            junk += end - pos
            if junk > MAX_GIF_JUNK:
                raise DecodeLimitError(
                    f"GIF with over {MAX_GIF_JUNK:,} stray bytes between its blocks (encoders write none); "
                    "reading it would take seconds", path)
            pos = end
            continue
        while pos < len(data) and data[pos]:  # sub-blocks, up to the zero-length terminator
            blocks += 1
            if blocks > MAX_GIF_BLOCKS:
                raise DecodeLimitError(
                    f"GIF with over {MAX_GIF_BLOCKS:,} data sub-blocks (a 67 MB image in the 255-byte "
                    "blocks encoders write); reading it would take seconds", path)
            pos += data[pos] + 1
        pos += 1
    if frames > 1:
        count = f"over {MAX_GIF_FRAMES_COUNTED}" if frames > MAX_GIF_FRAMES_COUNTED else str(frames)
        raise AnimatedImageError(
            f"GIF image with {count} frames (animated or multi-page images are not supported)", path)


def _check_webp(data: bytes, path: str | None) -> None:
    """Animation frames (ANMF chunks) along the RIFF chunk list, which is walked no further than
    :data:`MAX_WEBP_CHUNKS`."""
    pos, chunks, frames = 12, 0, 0
    while pos + 8 <= len(data):
        tag, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        chunks += 1
        if chunks > MAX_WEBP_CHUNKS:
            raise DecodeLimitError(
                f"WebP with over {MAX_WEBP_CHUNKS:,} chunks (a still image has a few)", path)
        frames += tag == b"ANMF"
        pos += 8 + size + (size & 1)
    if frames > 1:
        raise AnimatedImageError(
            f"WEBP image with {frames} frames (animated or multi-page images are not supported)", path)


def _check_tiff(data: bytes, path: str | None) -> None:
    """Pages, counted along the chain of image file directories as Pillow follows it (Pillow reads
    each one's tags to count them: a 20 MB file of tiny directories is ~100,000 pages of Python
    work), up to :data:`MAX_TIFF_IFDS` of them; each directory's entries; the first page's strips."""
    head = tiff.header(data)
    if head is None:
        return
    offset, seen = head.first, []
    while offset and offset not in seen:  # Pillow ends the chain at an offset it has seen
        if len(seen) > MAX_TIFF_IFDS:
            raise AnimatedImageError(
                f"TIFF image with over {MAX_TIFF_IFDS} frames (animated or multi-page images are not "
                "supported)", path)
        ifd = tiff.directory(data, head, offset)
        if ifd is None:
            raise ImageDecodeError(
                f"truncated TIFF: image directory {len(seen) + 1} is at byte {offset:,}, past the end of the "
                f"file ({len(data):,} bytes)", path)
        if ifd.present > MAX_TIFF_TAGS:
            raise DecodeLimitError(
                f"TIFF image directory with {ifd.present:,} entries (over {MAX_TIFF_TAGS:,}; real files "
                "have a few dozen); reading it would take seconds", path)
        if not seen:
            _check_tiff_strips(tiff.directory(data, head, offset, with_entries=True), path)
        seen.append(offset)
        if ifd.next is None:
            break  # the directory runs past the end: Pillow's chain ends there too
        offset = ifd.next
    if len(seen) > 1:
        raise AnimatedImageError(
            f"TIFF image with {len(seen)} frames (animated or multi-page images are not supported)", path)


def _check_tiff_strips(ifd: tiff.Directory | None, path: str | None) -> None:
    if ifd is None:
        return
    for tag, what in ((tiff.STRIP_OFFSETS, "strips"), (tiff.TILE_OFFSETS, "tiles")):
        entry = ifd.entries.get(tag)
        if entry is not None and entry.count > MAX_TIFF_STRIPS:
            raise DecodeLimitError(
                f"TIFF with {entry.count:,} {what} (over {MAX_TIFF_STRIPS:,}: each is set up and decoded on "
                "its own, about 4 us apiece); decoding it would take seconds", path)


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


# PNM header whitespace and comments (Pillow's: a comment runs to CR or LF) and tokens.
_PNM_SPACE = re.compile(rb"(?:[ \t\n\v\f\r]+|#[^\r\n]*)*")
_PNM_TOKEN = re.compile(rb"[^ \t\n\v\f\r#]+")


def _check_pnm(data: bytes, path: str | None) -> None:
    """Header and comment sizes: the header (magic, size, maxval or scale, comments) must end
    within :data:`MAX_PNM_HEADER` bytes; a plain (ASCII) file's pixel data may hold at most
    :data:`MAX_PNM_DATA_COMMENTS` comments."""
    window = data[: MAX_PNM_HEADER + 1]
    magic = _PNM_TOKEN.match(window)
    if magic is None:
        return
    pos, tokens = magic.end(), 2 if magic.group() in (b"P1", b"P4") else 3
    for _ in range(tokens):
        pos = _PNM_SPACE.match(window, pos).end()  # matches the empty string at least
        token = _PNM_TOKEN.match(window, pos)
        if token is None:
            break
        pos = token.end()
    if pos > MAX_PNM_HEADER or (pos == len(window) and len(data) > len(window)):
        raise DecodeLimitError(
            f"PNM header (size and maxval with their comments) longer than {MAX_PNM_HEADER // 1024} KiB; "
            "writers put a line or two there", path)
    if magic.group() in (b"P1", b"P2", b"P3"):
        comments = data.count(b"#", pos)
        if comments > MAX_PNM_DATA_COMMENTS:
            raise DecodeLimitError(
                f"plain PNM with {comments:,} comments in its pixel data (over {MAX_PNM_DATA_COMMENTS}; "
                "writers put none there); decoding it would take minutes", path)


_CHECKS = {"jpeg": _check_jpeg, "png": _check_png, "gif": _check_gif, "tiff": _check_tiff, "bmp": _check_bmp,
           "webp": _check_webp, "ppm": _check_pnm}
