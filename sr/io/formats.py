"""The one table of image formats (:data:`FORMATS`) and the lookups derived from it.

The CLI, evaluation, training and the service read their format lists from here, so a new format
is one row.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from .errors import ImageEncodeError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Every header Pillow's TIFF plugin opens (its PREFIXES): classic in both byte orders, the two with
# the version bytes swapped (Pillow assumes the order of the first two bytes), and BigTIFF.
TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II\x00*", b"MM*\x00", b"II+\x00", b"MM\x00+")
# The ISO-BMFF major brands that say AVIF. Pillow's AVIF plugin also tries the generic HEIF brands
# mif1 and msf1, but a file with those is as likely HEIC: one that fails to decode is "not a
# supported format" (415), not a damaged AVIF (400).
AVIF_BRANDS = (b"avif", b"avis")
# Pillow's PNM plugin: "P" and one of 0-6, f, y accepted; it opens the magic numbers of its MODES,
# read up to whitespace or 6 characters.
_PNM_MAGIC = re.compile(rb"P[1-6f](?:[ \t\n\v\f\r]|$)|P0CMYK|PyP(?:[ \t\n\v\f\r]|$)|PyRGBA|PyCMYK")


@dataclass(frozen=True)
class ImageFormat:
    """One image format, everything sr knows about it: a new format is one row of :data:`FORMATS`.

    ``name`` is the canonical name (:func:`encode_image`'s), ``cli_name`` the one users type (``sr
    upscale -f``, the service's ``format`` field; default ``name``). ``suffixes[0]`` is the one written.
    ``readable`` formats are on :func:`read_image`'s allow-list, ``writable`` ones can be encoded;
    ``listed`` suffixes are picked up by evaluation/training folder listings; ``signatures`` are how
    the file begins (the service tells corrupt files from non-images by them; :func:`sniff` adds
    the formats whose magic number is no fixed prefix). ``upload``: accepted from uploads by the
    service (:func:`upload_formats`); the others are read from local files only.
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
    upload: bool = True

    @property
    def user_name(self) -> str:
        return self.cli_name or self.name


# Formats read_image accepts (in this order). An allow-list keeps Pillow away from plugins that shell
# out (EPS) or that nobody feeds to an upscaler; GIF is included so animated GIFs get their own clear
# error. GIF, PPM and AVIF are not picked up by dataset listings. The service takes the formats people
# upload and leaves PNM to local files: Pillow's PNM reader steps through its header
# one byte at a time in Python and strips each comment of plain PNM pixel data by copying its buffer
# (10 M comments in 19 MB held a worker 61 s), for a format no browser or camera writes.
FORMATS: dict[str, ImageFormat] = {f.name: f for f in (
    ImageFormat("png", "PNG", (".png",), "image/png", writable=True, max_side=2**31 - 1,
                signatures=(PNG_MAGIC,)),
    ImageFormat("jpeg", "JPEG", (".jpg", ".jpeg"), "image/jpeg", writable=True, cli_name="jpg",
                max_side=65_535, pil_aliases=("MPO",), signatures=(b"\xff\xd8\xff",)),
    ImageFormat("webp", "WEBP", (".webp",), "image/webp", writable=True, max_side=16_383),
    ImageFormat("bmp", "BMP", (".bmp",), "image/bmp", signatures=(b"BM",)),
    ImageFormat("tiff", "TIFF", (".tif", ".tiff"), "image/tiff", signatures=TIFF_MAGIC),
    ImageFormat("gif", "GIF", (".gif",), "image/gif", listed=False, signatures=(b"GIF87a", b"GIF89a")),
    ImageFormat("ppm", "PPM", (".ppm", ".pgm", ".pbm", ".pnm"), "image/x-portable-pixmap", listed=False,
                upload=False),
    ImageFormat("avif", "AVIF", (".avif",), "image/avif", listed=False),
)}


def read_formats() -> tuple[str, ...]:
    """Pillow names of the formats :func:`read_image` accepts."""
    return tuple(f.pil_name for f in FORMATS.values() if f.readable)


def upload_formats() -> tuple[str, ...]:
    """Pillow names of the formats the service accepts from uploads (PNM is for local files only)."""
    return tuple(f.pil_name for f in FORMATS.values() if f.readable and f.upload)


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
    """The fixed prefixes files of the readable formats begin with (:func:`sniff` also knows WebP,
    AVIF and PNM, whose magic numbers are no fixed prefix)."""
    return tuple(sig for f in FORMATS.values() if f.readable for sig in f.signatures)


def sniff(data: bytes) -> ImageFormat | None:
    """The readable format whose Pillow plugin would take ``data``, from its first bytes (every
    magic number Pillow accepts for it), or None."""
    head = data[:16]
    for f in FORMATS.values():
        if f.readable and f.signatures and head.startswith(f.signatures):
            return f
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return FORMATS["webp"]
    if head[4:8] == b"ftyp" and head[8:12] in AVIF_BRANDS:
        return FORMATS["avif"]
    if _PNM_MAGIC.match(head):
        return FORMATS["ppm"]
    return None


def looks_like_image(data: bytes, formats: Collection[str] | None = None) -> bool:
    """Whether ``data`` starts like one of the formats read here (of ``formats``, Pillow names, when
    given): a file that does but fails to decode is damaged, anything else is not an image we read
    (the service's 400 vs 415)."""
    row = sniff(data)
    return row is not None and (formats is None or row.pil_name in formats)


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


