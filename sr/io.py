"""Image I/O: decode common formats into float arrays, encode them back, write files atomically.

:func:`read_image` turns a file, bytes or binary stream into a :class:`DecodedImage`: float32 colour in
[0, 1] (one channel for gray sources, three for colour), alpha split off, EXIF orientation applied, the
ICC profile kept, 16-bit sources kept at full precision. Anything it cannot take (empty, truncated,
corrupt, not an image, animated, too many pixels) raises one :class:`ImageError` subclass with a clear
message. :func:`encode_image` / :func:`write_image` go the other way: PNG (16-bit when the source
was), JPEG or WebP, alpha recombined, ICC profile written back, files replaced atomically.

:data:`FORMATS` is the one table of image formats (suffixes, Pillow names, MIME types, readable or
writable) that the CLI, evaluation, training and the service read; :func:`atomic_write` is the one way
sr writes a file (images, weights, checkpoints, caches, exports, reports).

Pillow reads 16-bit colour PNG/TIFF as 8-bit, so those are decoded twice with swapped byte-order
raw modes (high bytes, then low bytes) and written back by a small PNG encoder of our own.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import struct
import sys
import threading
import warnings
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageCms, PngImagePlugin, UnidentifiedImageError

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
# zlib level for PNG output: 3 encodes ~3x faster than Pillow's default 6 for ~1-4% larger files
PNG_COMPRESS_LEVEL = 3


@dataclass(frozen=True)
class ImageFormat:
    """One image format, everything sr knows about it: a new format is one row of :data:`FORMATS`.

    ``name`` is the canonical name (:func:`encode_image`'s), ``cli_name`` the one users type (``sr
    upscale -f``, the service's ``format`` field; default ``name``). ``suffixes[0]`` is the one written.
    ``readable`` formats are on :func:`read_image`'s allow-list, ``writable`` ones can be encoded;
    ``listed`` suffixes are picked up by evaluation/training folder listings; ``signatures`` are how
    the file begins (the service tells corrupt files from non-images by them).
    """

    name: str
    pil_name: str
    suffixes: tuple[str, ...]
    mime: str
    readable: bool = True
    writable: bool = False
    listed: bool = True
    cli_name: str | None = None
    max_side: int | None = None  # format limit on width and height (writable formats)
    pil_aliases: tuple[str, ...] = ()  # other names Pillow reports for it (MPO: multi-picture JPEG)
    signatures: tuple[bytes, ...] = ()

    @property
    def user_name(self) -> str:
        return self.cli_name or self.name


# Formats read_image accepts (in this order). An allow-list keeps Pillow away from plugins that shell
# out (EPS) or that nobody feeds to an upscaler; GIF is included so animated GIFs get their own clear
# error. GIF, PPM and AVIF are not picked up by dataset listings.
FORMATS: dict[str, ImageFormat] = {f.name: f for f in (
    ImageFormat("png", "PNG", (".png",), "image/png", writable=True, max_side=2**31 - 1,
                signatures=(b"\x89PNG\r\n\x1a\n",)),
    ImageFormat("jpeg", "JPEG", (".jpg", ".jpeg"), "image/jpeg", writable=True, cli_name="jpg",
                max_side=65_535, pil_aliases=("MPO",), signatures=(b"\xff\xd8\xff",)),
    ImageFormat("webp", "WEBP", (".webp",), "image/webp", writable=True, max_side=16_383),
    ImageFormat("bmp", "BMP", (".bmp",), "image/bmp", signatures=(b"BM",)),
    ImageFormat("tiff", "TIFF", (".tif", ".tiff"), "image/tiff", signatures=(b"II*\x00", b"MM\x00*")),
    ImageFormat("gif", "GIF", (".gif",), "image/gif", listed=False, signatures=(b"GIF87a", b"GIF89a")),
    ImageFormat("ppm", "PPM", (".ppm", ".pgm", ".pbm", ".pnm"), "image/x-portable-pixmap", listed=False,
                signatures=tuple(b"P%d" % i for i in range(1, 7))),
    ImageFormat("avif", "AVIF", (".avif",), "image/avif", listed=False),
)}


def read_formats() -> tuple[str, ...]:
    """Pillow names of the formats :func:`read_image` accepts."""
    return tuple(f.pil_name for f in FORMATS.values() if f.readable)


def output_formats() -> tuple[str, ...]:
    """Canonical names of the formats :func:`encode_image` writes."""
    return tuple(f.name for f in FORMATS.values() if f.writable)


def output_choices() -> tuple[str, ...]:
    """The output format names users type (``png``, ``jpg``, ``webp``)."""
    return tuple(f.user_name for f in FORMATS.values() if f.writable)


def read_suffixes() -> frozenset[str]:
    """Suffixes of every readable format (``sr upscale``'s folder scan)."""
    return frozenset(s for f in FORMATS.values() if f.readable for s in f.suffixes)


def listed_suffixes() -> frozenset[str]:
    """Suffixes that evaluation and training folder listings pick up."""
    return frozenset(s for f in FORMATS.values() if f.readable and f.listed for s in f.suffixes)


def signatures() -> tuple[bytes, ...]:
    """How files of the readable formats begin."""
    return tuple(sig for f in FORMATS.values() if f.readable for sig in f.signatures)


def format_for(key: str) -> ImageFormat | None:
    """The row for a name, user name, suffix or Pillow name (any case), or None."""
    key = str(key).strip().lower()
    for f in FORMATS.values():
        if (key.lstrip(".") in (f.name, f.user_name) or key in f.suffixes
                or key.upper() in (f.pil_name, *f.pil_aliases)):
            return f
    return None


def writable_format_for(key: str) -> ImageFormat | None:
    """Like :func:`format_for`, for writable formats only (suffixes with or without the dot)."""
    key = str(key).strip().lower().lstrip(".")
    for f in FORMATS.values():
        if f.writable and (key in (f.name, f.user_name) or f".{key}" in f.suffixes):
            return f
    return None


def _one_of(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


# Pillow's decoders signal bad data with assorted exception types.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, zlib.error, IndexError, KeyError)


class ImageError(ValueError):
    """An image that cannot be read or written; ``str(e)`` is a message for the user."""

    def __init__(self, reason: str, path: str | os.PathLike | None = None) -> None:
        self.reason = reason
        self.path = None if path is None else os.fspath(path)
        super().__init__(f"{self.path}: {reason}" if self.path else reason)


class ImageDecodeError(ImageError):
    """Zero bytes, truncated, corrupt, not an image, or an unsupported format or pixel mode."""


class UnsupportedModeError(ImageDecodeError):
    """A well-formed image in a pixel mode we do not convert (float, LAB, ...); ``mode`` names it."""

    def __init__(self, mode: str, path: str | os.PathLike | None = None) -> None:
        self.mode = mode
        super().__init__(f"unsupported pixel mode {mode}", path)


class AnimatedImageError(ImageError):
    """More than one frame (animated GIF/WebP/APNG, multi-page TIFF)."""


class ImageTooLargeError(ImageError):
    """More pixels than allowed (decompression-bomb protection)."""


class DecodeLimitError(ImageError):
    """A well-formed but hostile structure: more JPEG scans or PNG metadata than any real image has,
    refused before decoding because decoding it would take unbounded time."""


class ImageEncodeError(ImageError):
    """Unknown output format, bad quality, or an image the output format cannot hold."""


class ImageWriteError(ImageError):
    """The output file could not be written (missing folder, permissions, disk full)."""


@dataclass(eq=False)  # array fields: == would be ambiguous
class DecodedImage:
    """Decoded pixels plus what is needed to write them back faithfully.

    ``pixels`` is float32 (H, W, C) in [0, 1] with C = 1 (gray) or 3 (colour); a 2-D array is taken
    as gray. ``alpha`` is float32 (H, W) or None. ``bit_depth`` 16 means: write back as 16-bit PNG.
    Pixels may instead be integer samples, uint8 for 8-bit and uint16 for 16-bit images (what
    ``Upscaler.upscale(..., quantize=True)`` returns: a quarter of float32's memory); alpha, if
    any, is then samples of the same type. Decoding always gives float32.
    """

    pixels: np.ndarray
    alpha: np.ndarray | None = None
    bit_depth: int = 8
    icc_profile: bytes | None = None
    format: str | None = None
    mode: str | None = None

    def __post_init__(self) -> None:
        if self.bit_depth not in (8, 16):
            raise ValueError(f"bit_depth must be 8 or 16, got {self.bit_depth}")
        samples = SAMPLE_TYPES[self.bit_depth]
        px = self.pixels
        if not (isinstance(px, np.ndarray) and px.dtype == samples):
            if isinstance(px, np.ndarray) and px.dtype.kind in "ui":
                raise ValueError(f"{self.bit_depth}-bit integer pixels must be {np.dtype(samples)}, "
                                 f"got {px.dtype}")
            px = np.asarray(px, dtype=np.float32)
        if px.ndim == 2:
            px = px[:, :, None]
        if px.ndim != 3 or px.shape[2] not in (1, 3):
            raise ValueError(f"pixels must be (H, W, 1) or (H, W, 3), got shape {px.shape}")
        self.pixels = px
        if self.alpha is not None:
            a = self.alpha
            if px.dtype != np.float32 and not (isinstance(a, np.ndarray) and a.dtype == px.dtype):
                raise ValueError(f"alpha must be {px.dtype} samples like the pixels")
            a = np.asarray(a, dtype=px.dtype)
            if a.ndim == 3 and a.shape[2] == 1:
                a = a[:, :, 0]
            if a.shape != px.shape[:2]:
                raise ValueError(f"alpha must be {px.shape[:2]}, got shape {a.shape}")
            self.alpha = a

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def channels(self) -> int:
        return int(self.pixels.shape[2])

    @property
    def is_gray(self) -> bool:
        return self.pixels.shape[2] == 1

    @property
    def has_alpha(self) -> bool:
        return self.alpha is not None


# --------------------------------------------------------------------------------------------- formats


def normalize_format(format: str) -> str:
    """``"PNG"``, ``".jpg"``, ``"jpeg"``... -> one of :func:`output_formats`; else ImageEncodeError."""
    row = writable_format_for(format)
    if row is None:
        choices = _one_of(list(output_choices()))
        raise ImageEncodeError(f"unsupported output format {format!r} (use {choices})")
    return row.name


def format_from_path(path: str | Path) -> str:
    """Output format from a file name's suffix (``.png``, ``.jpg``/``.jpeg``, ``.webp``)."""
    suffix = Path(path).suffix
    if not suffix:
        written = [f.suffixes[0] for f in FORMATS.values() if f.writable]
        raise ImageEncodeError(
            f"no file suffix to choose the output format from (use {_one_of(written)})", path
        )
    try:
        return normalize_format(suffix)
    except ImageEncodeError as e:
        raise ImageEncodeError(e.reason, path) from None


def suffix_for(format: str) -> str:
    """File suffix for an output format: ``".png"``, ``".jpg"`` or ``".webp"``."""
    return FORMATS[normalize_format(format)].suffixes[0]


# --------------------------------------------------------------------------------------------- reading

class _PillowSettings:
    """Pillow's process-wide settings for our decodes, shared by every thread that decodes.

    Decoding needs warnings silenced (``warnings.catch_warnings`` swaps process-wide state) and a
    larger PNG metadata limit (a module global). Every decode wants the same values, so the first
    thread in applies them and the last one out restores them: no decode waits for another (a lock
    held for each whole decode made a header read queue behind a 13 s decode, issue 45).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held only while counting users, never during a decode
        self._users = 0
        self._saved: tuple[warnings.catch_warnings, int] | None = None

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                caught = warnings.catch_warnings()
                caught.__enter__()
                warnings.simplefilter("ignore")
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                self._saved = (caught, PngImagePlugin.MAX_TEXT_CHUNK)
                PngImagePlugin.MAX_TEXT_CHUNK = max(PngImagePlugin.MAX_TEXT_CHUNK, MAX_PNG_CHUNK)
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._saved is not None:
                    caught, chunk_limit = self._saved
                    PngImagePlugin.MAX_TEXT_CHUNK = chunk_limit
                    caught.__exit__(None, None, None)
                    self._saved = None


# Pillow warnings never leak; its decompression-bomb warning becomes an exception.
_quiet_pillow = _PillowSettings()


def read_image(
    source: str | Path | bytes | BinaryIO, max_pixels: int | None = DEFAULT_MAX_PIXELS
) -> DecodedImage:
    """Decode a path, bytes or binary stream. Raises an :class:`ImageError` subclass on bad input.

    ``max_pixels`` (None: no limit of ours) is checked on the header, before any pixel is decoded.
    Pillow's own limit (``PIL.Image.MAX_IMAGE_PIXELS``) applies too: the effective limit is the
    smaller of the two.
    """
    data, path = _read_source(source)
    if not data:
        raise ImageDecodeError("empty file (0 bytes)", path)
    check_decode_cost(data, path)
    with _quiet_pillow(), _decoding(path):
        return _decode(data, path, max_pixels)


def read_array(path: str | Path, rgb: bool = False) -> np.ndarray:
    """A file as uint8 pixels, decoded by :func:`read_image` (16-bit samples scaled, not clipped; EXIF
    orientation applied; alpha dropped): (H, W) for gray sources and (H, W, 3) for colour, or always
    (H, W, 3) with ``rgb``. The one decode of training, evaluation and inference for local files,
    so all three see the same pixels (no pixel limit of ours: the caller chose the file)."""
    px = read_image(path, max_pixels=None).pixels
    if rgb and px.shape[2] == 1:
        px = np.repeat(px, 3, axis=2)
    out = np.clip(np.round(px * np.float32(255)), 0, 255).astype(np.uint8)
    return out if out.shape[2] == 3 else out[:, :, 0]


def read_size(
    source: str | Path | bytes | BinaryIO, max_pixels: int | None = DEFAULT_MAX_PIXELS
) -> tuple[int, int]:
    """(width, height) as :func:`read_image` would return it (EXIF orientation applied), from the
    header only: no pixel is decoded. Raises what :func:`read_image` raises for a bad header."""
    data, path = _read_source(source)
    if not data:
        raise ImageDecodeError("empty file (0 bytes)", path)
    check_decode_cost(data, path)
    with _quiet_pillow(), _decoding(path):
        im = _open(data)
        _check_pixels(*im.size, max_pixels, path)
        w, h = im.size
        return (h, w) if _orientation(im, header_only=True) in (5, 6, 7, 8) else (w, h)


def check_decode_cost(data: bytes, path: str | None = None) -> None:
    """Refuse, from the raw bytes alone, files whose decode would cost far more than their pixels.

    A pure-Python walk of the file's structure (no inflating of pixel data, no Pillow): JPEG scans
    (progressive scan bombs) and entropy data too short for the declared size (a 3 KB file claiming
    16 MP); PNG chunk count, repeated iCCP and inflated metadata size (zlib bombs in metadata); GIF
    frames (Pillow decodes every frame just to count them) and TIFF pages (animated and multi-page
    images are refused anyway).
    Raises :class:`DecodeLimitError`, :class:`AnimatedImageError` or :class:`ImageDecodeError`.
    """
    try:
        if data.startswith(b"\xff\xd8"):
            _check_jpeg(data, path)
        elif data.startswith(_PNG_MAGIC):
            _check_png(data, path)
        elif data[:6] in (b"GIF87a", b"GIF89a"):
            _check_gif(data, path)
        elif data[:4] in (b"II*\x00", b"MM\x00*"):
            _check_tiff(data, path)
    except (IndexError, struct.error):
        return  # a structure we cannot walk: Pillow gives the precise error for it


# JPEG markers with no length field: SOI, EOI, RSTn, TEM.
_JPEG_BARE = frozenset({0xD8, 0xD9, 0x01, *range(0xD0, 0xD8)})
# Frame headers of Huffman-coded JPEGs (baseline, extended, progressive): every 8x8 block of those
# takes at least one bit (its DC code).
_JPEG_HUFFMAN_SOF = frozenset({0xC0, 0xC1, 0xC2})
# The next marker after entropy-coded data: 0xFF not followed by a stuffed 0x00, RSTn or fill 0xFF.
_JPEG_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def _check_jpeg(data: bytes, path: str | None) -> None:
    pos, scans, entropy, blocks = 2, 0, 0, 0
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return  # not at a marker: corrupt, Pillow says how
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
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
        rest = body.split(b"\x00", 3)
        return rest[3] if len(rest) == 4 else None
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
    count them: a 20 MB file of tiny directories is ~100,000 pages of Python work)."""
    order = "<" if data[:2] == b"II" else ">"
    offset, pages, seen = struct.unpack_from(order + "I", data, 4)[0], 0, set()
    while offset and offset not in seen and offset + 2 <= len(data):
        seen.add(offset)
        pages += 1
        entries = struct.unpack_from(order + "H", data, offset)[0]
        offset = struct.unpack_from(order + "I", data, offset + 2 + 12 * entries)[0]
    if pages > 1:
        raise AnimatedImageError(
            f"TIFF image with {pages} frames (animated or multi-page images are not supported)", path)


@contextmanager
def _decoding(path: str | None) -> Iterator[None]:
    """Pillow's assorted exceptions -> one ImageError subclass with a message for the user."""
    try:
        yield
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageTooLargeError(f"too many pixels ({e})", path) from e
    except UnidentifiedImageError as e:
        names = ", ".join(read_formats())
        raise ImageDecodeError(f"not an image, or not a supported format ({names})", path) from e
    except MemoryError as e:
        raise ImageTooLargeError("not enough memory to decode this image", path) from e
    except _DECODE_ERRORS as e:
        if isinstance(e, ValueError) and "MAX_TEXT_CHUNK" in str(e):  # Pillow's metadata-bomb guard
            limit = MAX_PNG_CHUNK // 2**20
            raise ImageTooLargeError(
                f"a metadata chunk (ICC profile or text) decompresses to over {limit} MiB", path
            ) from e
        raise ImageDecodeError(f"truncated or corrupt image data ({e})", path) from e


def _check_pixels(w: int, h: int, max_pixels: int | None, path: str | None) -> None:
    if max_pixels is not None and w * h > max_pixels:
        raise ImageTooLargeError(f"{w}x{h} is {w * h:,} pixels, over the limit of {max_pixels:,}", path)


def _read_source(source: str | Path | bytes | BinaryIO) -> tuple[bytes, str | None]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), None
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            return Path(path).read_bytes(), path
        except FileNotFoundError:
            raise ImageDecodeError("file not found", path) from None
        except IsADirectoryError:
            raise ImageDecodeError("is a folder, not an image file", path) from None
        except OSError as e:
            raise ImageDecodeError(f"cannot read file ({e.strerror or e})", path) from None
    if not hasattr(source, "read"):
        raise TypeError(
            f"read_image needs a path, bytes or a binary file object, got {type(source).__name__}"
        )
    name = getattr(source, "name", None)
    path = name if isinstance(name, str) else None
    data = source.read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImageDecodeError("file object must be opened in binary mode", path)
    return bytes(data), path


def _open(data: bytes) -> Image.Image:
    Image.init()
    return Image.open(io.BytesIO(data), formats=[f for f in read_formats() if f in Image.OPEN])


def _decode(data: bytes, path: str | None, max_pixels: int | None) -> DecodedImage:
    im = _open(data)
    w, h = im.size
    _check_pixels(w, h, max_pixels, path)
    if w < 1 or h < 1:
        raise ImageDecodeError(f"empty image ({w}x{h})", path)
    frames = getattr(im, "n_frames", 1)
    if frames > 1 and im.format != "MPO":  # MPO: camera JPEG + preview/depth frames; the first is the photo
        raise AnimatedImageError(
            f"{im.format} image with {frames} frames (animated or multi-page images are not supported)", path
        )
    fmt, mode = im.format, im.mode
    icc = im.info.get("icc_profile") or None
    wide = _wide_rawmode(im)
    if wide is not None:
        values, alpha = _decode_wide(im, data, wide)
        depth = 16
    else:
        im.load()
        values, alpha, depth, icc = _decode_standard(im, icc, path)
    maxv = np.float32(65535 if depth == 16 else 255)
    orientation = _orientation(im)
    pixels = values.astype(np.float32)
    pixels /= maxv  # in place: a 12 MP photo's float32 copy is 144 MB, a second one would double it
    pixels = _orient(pixels, orientation)
    if alpha is not None:
        alpha = _orient(alpha.astype(np.float32) / maxv, orientation)
    return DecodedImage(pixels, alpha, depth, icc, fmt, mode)


# Raw modes Pillow narrows to 8 bits -> the raw mode that yields the other (low) byte of each sample.
_NATIVE = "L" if sys.byteorder == "little" else "B"
_LOW_BYTE_RAWMODE = {
    "RGB;16B": "RGB;16L",
    "RGB;16L": "RGB;16B",
    "RGBX;16B": "RGBX;16L",
    "RGBX;16L": "RGBX;16B",
    "RGBA;16B": "RGBA;16L",
    "RGBA;16L": "RGBA;16B",
    "LA;16B": "RGBA",  # PNG gray+alpha 16 is read as RGBA: raw mode RGBA returns all 4 bytes at once
}


def _tile_rawmode(args: object) -> str | None:
    if isinstance(args, str):
        return args
    if isinstance(args, tuple) and args and isinstance(args[0], str):
        return args[0]
    return None


def _with_rawmode(args: object, rawmode: str) -> object:
    return rawmode if isinstance(args, str) else (rawmode, *args[1:])  # type: ignore[index]


def _wide_rawmode(im: Image.Image) -> str | None:
    """The 16-bit colour raw mode of ``im`` (16N resolved to B/L) if Pillow would narrow it, else None."""
    modes = {_tile_rawmode(t.args) for t in im.tile}
    if len(modes) != 1:
        return None
    raw = modes.pop()
    if raw is not None and raw.endswith(";16N"):
        raw = raw[:-1] + _NATIVE
    return raw if raw in _LOW_BYTE_RAWMODE else None


def _set_rawmode(im: Image.Image, rawmode: str) -> None:
    im.tile = [t._replace(args=_with_rawmode(t.args, rawmode)) for t in im.tile]


def _decode_wide(im: Image.Image, data: bytes, raw: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Full-precision uint16 colour (H, W, C) and alpha of a 16-bit colour image."""
    if raw == "LA;16B":
        _set_rawmode(im, "RGBA")
        im.load()
        b = np.asarray(im).astype(np.uint16)  # gray hi, gray lo, alpha hi, alpha lo
        return ((b[..., 0] << 8) | b[..., 1])[..., None], (b[..., 2] << 8) | b[..., 3]
    _set_rawmode(im, raw)  # 16N -> explicit order, so the swap below is the opposite one
    im.load()
    low = _open(data)
    _set_rawmode(low, _LOW_BYTE_RAWMODE[raw])
    low.load()
    v = (np.asarray(im).astype(np.uint16) << 8) | np.asarray(low)
    if v.shape[2] == 4:
        return v[..., :3], v[..., 3]
    return v, _key_alpha(v, im.info.get("transparency"), 65535)


def _key_alpha(values: np.ndarray, key: object, maxv: int) -> np.ndarray | None:
    """Alpha from a colour-key transparency (PNG tRNS for gray/RGB): the key colour is transparent."""
    if values.ndim == 2 and isinstance(key, int):
        hit = values == key
    elif values.ndim == 3 and isinstance(key, tuple) and len(key) == values.shape[2]:
        hit = np.all(values == np.asarray(key, dtype=values.dtype), axis=2)
    else:
        return None
    return np.where(hit, 0, maxv).astype(values.dtype)


def _decode_standard(
    im: Image.Image, icc: bytes | None, path: str | None
) -> tuple[np.ndarray, np.ndarray | None, int, bytes | None]:
    """(values (H, W, C) as integers, alpha or None, bit depth, icc) for everything but wide colour."""
    mode, key = im.mode, im.info.get("transparency")
    if mode.startswith("I;16"):
        v = np.asarray(im)
        v = (np.clip(v, 0, None) if v.dtype.kind == "i" else v).astype(np.uint16)  # I;16S: no negatives
        return v[..., None], _key_alpha(v, key, 65535), 16, icc
    if mode == "I":  # 32-bit int: values above 255 can only be 16-bit data (e.g. 16-bit TIFF/PGM)
        raw = np.asarray(im)
        depth = 16 if raw.size and int(raw.max()) > 255 else 8
        maxv = 65535 if depth == 16 else 255
        v = np.clip(raw, 0, maxv).astype(np.uint16)
        return v[..., None], _key_alpha(v, key, maxv), depth, icc
    if mode in ("1", "L"):
        v = np.asarray(im.convert("L"))  # mode 1 keys are stored as 0/255, matching the L values
        return v[..., None], _key_alpha(v, key, 255), 8, icc
    if mode == "RGB":
        v = np.asarray(im)
        return v, _key_alpha(v, key, 255), 8, icc
    if mode == "CMYK":
        return np.asarray(_cmyk_to_rgb(im, icc)), None, 8, None
    if mode in ("P", "PA"):
        has_alpha = (
            mode == "PA" or "transparency" in im.info or (im.palette is not None and "A" in im.palette.mode)
        )
        v = np.asarray(im.convert("RGBA" if has_alpha else "RGB"))
        if np.array_equal(v[..., 0], v[..., 1]) and np.array_equal(v[..., 0], v[..., 2]):
            v = v[..., [0, 3]] if has_alpha else v[..., :1]  # a gray palette stays gray
    elif mode in ("LA", "La"):
        v = np.asarray(im.convert("LA"))
    elif mode in ("RGBA", "RGBa"):
        v = np.asarray(im.convert("RGBA"))
    elif mode in ("RGBX", "YCbCr"):
        v = np.asarray(im.convert("RGB"))
    else:
        raise UnsupportedModeError(mode, path)
    if v.shape[2] in (2, 4):
        return v[..., :-1], v[..., -1], 8, icc
    return v, None, 8, icc


def _srgb() -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))


def _cmyk_to_rgb(im: Image.Image, icc: bytes | None) -> Image.Image:
    """CMYK -> sRGB through the embedded CMYK profile when there is one, else Pillow's naive formula."""
    if icc:
        try:
            src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            if src.profile.xcolor_space.strip() == "CMYK":
                out = ImageCms.profileToProfile(im, src, _srgb(), outputMode="RGB")
                if out is not None:
                    return out
        except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
            pass  # a broken or mismatched profile: fall back rather than refuse the image
    return im.convert("RGB")


# EXIF orientation -> numpy equivalent of Pillow's exif_transpose (for arrays of any channel count).
def _orient(a: np.ndarray, orientation: int) -> np.ndarray:
    if orientation == 2:
        a = a[:, ::-1]
    elif orientation == 3:
        a = a[::-1, ::-1]
    elif orientation == 4:
        a = a[::-1]
    elif orientation == 5:
        a = a.swapaxes(0, 1)
    elif orientation == 6:
        a = np.rot90(a, k=-1)
    elif orientation == 7:
        a = a[::-1, ::-1].swapaxes(0, 1)
    elif orientation == 8:
        a = np.rot90(a, k=1)
    return np.ascontiguousarray(a)


def _orientation(im: Image.Image, header_only: bool = False) -> int:
    try:
        if header_only and im.format == "PNG":
            # Pillow's PNG getexif() decodes the whole image to look for an eXIf chunk after the pixel
            # data: a "header-only" size read then cost a full decode (issue 45). Before the data is
            # where the spec puts it; read_image, which decodes anyway, also finds a late one.
            exif = Image.Exif()
            if im.info.get("exif"):
                exif.load(im.info["exif"])
            value = exif.get(0x0112, 1)
        else:
            value = im.getexif().get(0x0112, 1)
    except (*_DECODE_ERRORS, TypeError):
        return 1  # unreadable EXIF is not worth refusing the image over
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


# --------------------------------------------------------------------------------------------- writing


def encode_image(img: DecodedImage, format: str = "png", quality: int = 95) -> bytes:
    """Encode to PNG, JPEG or WebP bytes.

    PNG is 16-bit when ``img.bit_depth == 16`` (JPEG and WebP are always 8-bit). Alpha is kept in
    PNG and WebP and composited on white for JPEG. Gray stays gray except in WebP (which has no
    gray mode). The ICC profile is written back when its colour space matches the channels.
    """
    fmt = normalize_format(format)
    if isinstance(quality, bool) or not isinstance(quality, (int, np.integer)) or not 1 <= quality <= 100:
        raise ImageEncodeError(f"quality must be an integer from 1 to 100, got {quality!r}")
    limit = FORMATS[fmt].max_side or 2**31 - 1
    if img.width > limit or img.height > limit:
        raise ImageEncodeError(
            f"{img.width}x{img.height} is too large for {fmt.upper()} (at most {limit} per side)"
        )
    icc = _matching_icc(img.icc_profile, img.is_gray)
    colour, alpha = img.pixels, img.alpha
    if fmt == "jpeg" and alpha is not None:
        colour, alpha = to_float(colour), to_float(alpha)
        colour, alpha = colour * alpha[..., None] + (1.0 - alpha[..., None]), None  # composite on white
    planes = colour if alpha is None else np.concatenate([colour, alpha[..., None]], axis=2)
    if fmt == "png" and img.bit_depth == 16:
        return encode_png16(quantize(planes, np.uint16), icc)
    samples = quantize(planes, np.uint8)
    pil = Image.fromarray(samples[..., 0] if samples.shape[2] == 1 else samples)
    options: dict[str, object] = {"icc_profile": icc} if icc else {}
    if fmt == "jpeg":
        # 4:4:4 chroma at high quality: subsampling would blur the colour detail the upscaler added
        options.update(quality=quality, subsampling=0 if quality >= 90 else 2, optimize=True)
    elif fmt == "webp":
        options.update(quality=quality, method=4)
    else:
        options.update(compress_level=PNG_COMPRESS_LEVEL)
    buf = io.BytesIO()
    with _quiet_pillow():
        try:
            pil.save(buf, format=FORMATS[fmt].pil_name, **options)
        except (OSError, ValueError) as e:
            raise ImageEncodeError(f"{fmt.upper()} encoder failed ({e})") from e
    return buf.getvalue()


SAMPLE_TYPES = {8: np.uint8, 16: np.uint16}  # bit depth -> the integer type of its samples


def quantize(x: np.ndarray, dtype: type) -> np.ndarray:
    """Float samples in [0, 1] (clipped; NaN -> 0) to uint8 or uint16, rounded to nearest. Integer
    samples are returned as they are when already ``dtype``, else rescaled through float."""
    dtype = np.dtype(dtype)
    if dtype not in (np.uint8, np.uint16):
        raise ValueError(f"samples are uint8 or uint16, not {dtype}")
    if x.dtype == dtype:
        return x
    if x.dtype.kind in "ui":
        x = to_float(x)
    maxv = np.float32(np.iinfo(dtype).max)
    # One float32 working copy, then in place: each step of a chained expression would allocate
    # another image-sized temporary (the same values either way).
    y = np.nan_to_num(np.asarray(x, dtype=np.float32), nan=0.0, copy=True)
    np.clip(y, 0.0, 1.0, out=y)
    y *= maxv
    np.rint(y, out=y)
    return y.astype(dtype)


def to_float(x: np.ndarray) -> np.ndarray:
    """uint8/uint16 samples to float32 in [0, 1]; float input as float32."""
    if x.dtype.kind in "ui":
        return x.astype(np.float32) / np.float32(np.iinfo(x.dtype).max)
    return np.asarray(x, dtype=np.float32)


def _matching_icc(icc: bytes | None, gray: bool) -> bytes | None:
    """The profile if its colour space (header bytes 16-20) fits the output channels, else None."""
    if not icc or len(icc) < 128:
        return None
    space = icc[16:20]
    return icc if space == (b"GRAY" if gray else b"RGB ") else None


def write_image(path: str | Path, img: DecodedImage, format: str | None = None, quality: int = 95) -> Path:
    """Encode and write ``img`` atomically: a temporary file in the target folder, then a rename.

    The format comes from the suffix when ``format`` is None. On any failure the target is left as it
    was (absent or the previous file) and no temporary file remains.
    """
    path = Path(path)
    fmt = normalize_format(format) if format is not None else format_from_path(path)
    data = encode_image(img, fmt, quality)
    _atomic_write(path, data)
    return path


def _atomic_write(path: Path, data: bytes) -> None:
    if path.is_dir():
        raise ImageWriteError("is a folder", path)
    try:
        atomic_write(path, data)
    except _TempCreateError as e:
        raise ImageWriteError(f"cannot create a file in {path.parent} ({e.strerror or e})", path) from e
    except OSError as e:
        raise ImageWriteError(f"cannot write the file ({e.strerror or e})", path) from e


class _TempCreateError(OSError):
    """The temporary file could not be created (missing folder, permissions)."""


def atomic_write(path: str | Path, data: bytes | Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` all at once or not at all: the one way sr writes files.

    ``data`` is the bytes, or a function that writes them to the binary file it is given
    (``lambda f: torch.save(obj, f)``). They go to a private temporary name in the target folder,
    are flushed and fsynced, then renamed over ``path``. On any error (or Ctrl-C) the target is
    left as it was and the temporary file is removed; OSErrors propagate.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # O_EXCL: never clobber a stranger's file; mode 0o666 lets the umask set the final permissions
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as e:
        raise _TempCreateError(e.errno, e.strerror, e.filename) from e
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return path


# ------------------------------------------------------------------------------- 16-bit PNG encoder

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_PNG_COLOUR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> gray, gray+alpha, RGB, RGBA
_IDAT_PIECE = 1 << 20


def _chunk(tag: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)


def encode_png16(
    samples: np.ndarray, icc_profile: bytes | None = None, filter_type: int | None = None
) -> bytes:
    """A 16-bit PNG from uint16 (H, W, C), C = 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA.

    Pillow cannot write 16-bit colour PNG, hence this encoder. Rows use libpng's adaptive filter
    choice (least sum of absolute signed bytes) unless ``filter_type`` (0-4) forces one.
    """
    if samples.ndim == 2:
        samples = samples[:, :, None]
    h, w, c = samples.shape
    if c not in _PNG_COLOUR_TYPE or samples.dtype != np.uint16 or h < 1 or w < 1:
        raise ValueError(f"need uint16 (H, W, 1-4) samples, got {samples.dtype} {samples.shape}")
    if filter_type not in (None, 0, 1, 2, 3, 4):
        raise ValueError(f"filter_type must be None or 0-4, got {filter_type!r}")
    raw = np.ascontiguousarray(samples, dtype=">u2").view(np.uint8).reshape(h, w * c * 2)
    filtered = _png_filter(raw, c * 2, filter_type)
    parts = [_PNG_MAGIC, _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, _PNG_COLOUR_TYPE[c], 0, 0, 0))]
    if icc_profile:
        parts.append(_chunk(b"iCCP", b"ICC profile\x00\x00" + zlib.compress(icc_profile)))
    stream = zlib.compress(filtered.tobytes(), PNG_COMPRESS_LEVEL)
    parts += [_chunk(b"IDAT", stream[i : i + _IDAT_PIECE]) for i in range(0, len(stream), _IDAT_PIECE)]
    parts.append(_chunk(b"IEND", b""))
    return b"".join(parts)


def _png_filter(raw: np.ndarray, bpp: int, filter_type: int | None) -> np.ndarray:
    """PNG-filter each row of ``raw`` (H, stride) uint8; returns (H, 1 + stride) with the type byte.

    Encoding filters only look at unfiltered bytes, so every row (and filter) is done at once; rows go
    in blocks to bound memory. uint8 arithmetic wraps modulo 256, as PNG filters do.
    """
    h, stride = raw.shape
    out = np.empty((h, stride + 1), np.uint8)
    step = max(1, (1 << 21) // stride)  # ~2 MB of rows per block
    for r0 in range(0, h, step):
        r1 = min(h, r0 + step)
        x = raw[r0:r1]
        up = np.empty_like(x)
        up[1:] = x[:-1]
        up[0] = raw[r0 - 1] if r0 else 0
        left = np.zeros_like(x)
        left[:, bpp:] = x[:, :-bpp]
        up_left = np.zeros_like(x)
        up_left[:, bpp:] = up[:, :-bpp]
        if filter_type is not None:
            out[r0:r1, 0] = filter_type
            out[r0:r1, 1:] = x - _predict(filter_type, left, up, up_left) if filter_type else x
            continue
        best, choice = x.copy(), np.zeros(r1 - r0, np.uint8)
        best_cost = _signed_cost(best)
        for ft in (1, 2, 3, 4):
            cand = x - _predict(ft, left, up, up_left)
            cost = _signed_cost(cand)
            better = cost < best_cost
            best[better], best_cost[better], choice[better] = cand[better], cost[better], ft
        out[r0:r1, 0] = choice
        out[r0:r1, 1:] = best
    return out


def _signed_cost(rows: np.ndarray) -> np.ndarray:
    """libpng's filter heuristic: per row, the sum of |byte| with bytes read as signed."""
    return np.abs(rows.view(np.int8), dtype=np.int16).sum(axis=1, dtype=np.int64)


def _predict(filter_type: int, left: np.ndarray, up: np.ndarray, up_left: np.ndarray) -> np.ndarray:
    if filter_type == 1:
        return left
    if filter_type == 2:
        return up
    if filter_type == 3:
        return (left >> 1) + (up >> 1) + (left & up & 1)  # floor((a + b) / 2) without uint8 overflow
    return _paeth(left, up, up_left)


def _paeth(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Paeth predictor of uint8 arrays (left, up, up-left); the distances need signed arithmetic."""
    c16 = c.astype(np.int16)
    pa = b.astype(np.int16) - c16  # |p - a| with p = a + b - c
    pb = a.astype(np.int16) - c16  # |p - b|
    pc = np.abs(pa + pb)  # |p - c|
    np.abs(pa, out=pa)
    np.abs(pb, out=pb)
    out = np.where(pb <= pc, b, c)
    np.copyto(out, a, where=(pa <= pb) & (pa <= pc))
    return out
