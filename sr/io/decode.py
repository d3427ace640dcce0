"""Decoding: a path, bytes or stream -> :class:`DecodedImage` (float32, orientation applied, ICC kept).

Pillow reads 16-bit colour PNG/TIFF as 8-bit, so those are decoded twice with swapped byte-order
raw modes (high bytes, then low bytes).
"""

from __future__ import annotations

import io
import os
import re
import struct
import sys
import threading
import warnings
import zlib
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageCms, PngImagePlugin, UnidentifiedImageError

from .errors import (
    AnimatedImageError,
    ImageDecodeError,
    ImageError,
    ImageTooLargeError,
    UnsupportedFormatError,
    UnsupportedModeError,
)
from .formats import read_formats, sniff
from .guards import DEFAULT_MAX_PIXELS, MAX_PNG_CHUNK, check_decode_cost
from .image import SAMPLE_TYPES, DecodedImage
from .tiff import sample_layout

# Pillow's decoders signal bad data with assorted exception types; TypeError too (a TIFF directory
# without a size: "Missing dimensions"; an XMP tag that holds a number).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, zlib.error, IndexError, KeyError,
                  TypeError)
# Pillow's decompression-bomb messages carry the pixel count: "Image size (N pixels) exceeds ...".
_BOMB_PIXELS = re.compile(r"\((\d+) pixels\)")


class _PillowSettings:
    """Pillow's process-wide settings for our decodes, shared by every thread that decodes.

    Decoding needs warnings silenced (``warnings.catch_warnings`` swaps process-wide state) and a
    larger PNG metadata limit (a module global). Every decode wants the same values, so the first
    thread in applies them and the last one out restores them: no decode waits for another (a lock
    held for each whole decode made a header read queue behind a 13 s decode).
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
quiet_pillow = _PillowSettings()


def read_image(
    source: str | Path | bytes | BinaryIO, max_pixels: int | None = DEFAULT_MAX_PIXELS,
    formats: Collection[str] | None = None, samples: bool = False,
) -> DecodedImage:
    """Decode a path, bytes or binary stream. Raises an :class:`ImageError` subclass on bad input.

    ``samples``: keep the file's integers (uint8, uint16 for 16-bit images; alpha likewise) instead
    of float32: a quarter of the memory at 8 bits, and :func:`~sr.io.to_float` gives the same floats
    bit for bit (the engine converts them tile by tile). They may be read-only.

    ``max_pixels`` (None: no limit of ours) is checked on the header, before any pixel is decoded.
    Pillow's own limit (``PIL.Image.MAX_IMAGE_PIXELS``) applies too: the effective limit is the
    smaller of the two. ``formats``: the Pillow names accepted (None: every readable format; the
    service passes :func:`~sr.io.upload_formats`); a file of another format sr.io knows raises
    :class:`UnsupportedFormatError` before any parsing.
    """
    data, path = _read_source(source)
    names = _accepted(data, path, formats)
    check_decode_cost(data, path)
    with quiet_pillow(), _decoding(path, data, max_pixels, names):
        return _decode(data, path, max_pixels, names, samples)


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
    source: str | Path | bytes | BinaryIO, max_pixels: int | None = DEFAULT_MAX_PIXELS,
    formats: Collection[str] | None = None,
) -> tuple[int, int]:
    """(width, height) as :func:`read_image` would return it (EXIF orientation applied), from the
    header only: no pixel is decoded. Raises what :func:`read_image` raises for a bad header."""
    data, path = _read_source(source)
    names = _accepted(data, path, formats)
    check_decode_cost(data, path)
    with quiet_pillow(), _decoding(path, data, max_pixels, names):
        im = _open(data, names)
        _check_pixels(*im.size, max_pixels, path)
        w, h = im.size
        return (h, w) if _orientation(im, header_only=True) in (5, 6, 7, 8) else (w, h)


def _accepted(data: bytes, path: str | None, formats: Collection[str] | None) -> tuple[str, ...]:
    """The Pillow names to open ``data`` with; raises for an empty file, and for one of a format
    sr.io reads but ``formats`` leaves out (before any parsing: PNM's header is costly to parse)."""
    if not data:
        raise ImageDecodeError("empty file (0 bytes)", path)
    names = read_formats() if formats is None else tuple(f for f in read_formats() if f in formats)
    row = sniff(data)
    if row is not None and row.pil_name not in names:
        raise UnsupportedFormatError(
            f"{row.pil_name} images are not accepted here (accepted: {', '.join(names)})", path, row.pil_name)
    return names


@contextmanager
def _decoding(path: str | None, data: bytes, max_pixels: int | None,
              names: tuple[str, ...]) -> Iterator[None]:
    """Pillow's assorted exceptions -> one ImageError subclass with a message for the user."""
    try:
        yield
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise _too_many_pixels(e, max_pixels, path) from e
    except UnidentifiedImageError as e:
        layout = _unreadable_tiff_layout(data)
        if layout is not None:  # a valid TIFF whose samples Pillow has no mode for (e.g. RGB float)
            raise UnsupportedModeError(layout, path) from e
        raise ImageDecodeError(f"not an image, or not a supported format ({', '.join(names)})", path) from e
    except MemoryError as e:
        raise ImageTooLargeError("not enough memory to decode this image", path) from e
    except _DECODE_ERRORS as e:
        if isinstance(e, ValueError) and "MAX_TEXT_CHUNK" in str(e):  # Pillow's metadata-bomb guard
            limit = MAX_PNG_CHUNK // 2**20
            raise ImageTooLargeError(
                f"a metadata chunk (ICC profile or text) decompresses to over {limit} MiB", path
            ) from e
        raise ImageDecodeError(f"truncated or corrupt image data ({e})", path) from e


def _unreadable_tiff_layout(data: bytes) -> str | None:
    """The samples of a TIFF that Pillow's TIFF reader refuses for want of a pixel mode (Image.open
    says only "cannot identify"; the reader itself says "unknown pixel mode"), in words; else None."""
    row = sniff(data)
    if row is None or row.pil_name != "TIFF":
        return None
    from PIL import TiffImagePlugin

    try:
        TiffImagePlugin.TiffImageFile(io.BytesIO(data))
    except SyntaxError as e:
        return sample_layout(data) if str(e) == "unknown pixel mode" else None
    except Exception:  # noqa: BLE001 - any other failure: the file is not refused for its mode
        return None
    return None


def _too_many_pixels(e: Exception, max_pixels: int | None, path: str | None) -> ImageTooLargeError:
    """Pillow's decompression-bomb refusal (it comes before our own check, from its header read) in
    our words: the pixels against ``max_pixels``, the limit the caller set, when there is one."""
    found = _BOMB_PIXELS.search(str(e))
    if found is None:
        return ImageTooLargeError(f"too many pixels ({e})", path)
    pixels = int(found.group(1))
    if max_pixels is not None and pixels > max_pixels:
        return ImageTooLargeError(f"{pixels:,} pixels, over the limit of {max_pixels:,}", path)
    limit = Image.MAX_IMAGE_PIXELS or 0
    return ImageTooLargeError(f"{pixels:,} pixels, over Pillow's decompression-bomb limit of {limit:,}", path)


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


def _open(data: bytes, names: tuple[str, ...]) -> Image.Image:
    Image.init()
    return Image.open(io.BytesIO(data), formats=[f for f in names if f in Image.OPEN])


def _decode(
    data: bytes, path: str | None, max_pixels: int | None, names: tuple[str, ...], samples: bool = False,
) -> DecodedImage:
    im = _open(data, names)
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
    orientation = _orientation(im)
    if samples:  # in the bit depth's own type (an 8-bit mode I image's values come as uint16)
        kind = SAMPLE_TYPES[depth]
        values = _orient(values.astype(kind, copy=False), orientation)
        alpha = None if alpha is None else _orient(alpha.astype(kind, copy=False), orientation)
        return DecodedImage(values, alpha, depth, icc, fmt, mode)
    maxv = np.float32(65535 if depth == 16 else 255)
    # one pass, into the one float32 copy (a 12 MP photo's is 144 MB): the same division as casting
    # first and dividing in place, without a second walk over it
    pixels = np.divide(values, maxv, dtype=np.float32)
    pixels = _orient(pixels, orientation)
    if alpha is not None:
        alpha = _orient(np.divide(alpha, maxv, dtype=np.float32), orientation)
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
    low = _open(data, (im.format,))
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
            # data: a "header-only" size read then cost a full decode. Before the data is
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
