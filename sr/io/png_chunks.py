"""A PNG's chunk structure, walked without inflating anything: what a header read does not tell.

:func:`png_chunks` lists the chunks in file order; :func:`stored_size` is the IHDR's width and height
(before any EXIF orientation); :func:`late_exif_orientation` is the orientation of an eXIf chunk
found after the pixel data (IDAT): the decoder (Pillow's ``getexif`` once the pixels are loaded)
applies it, a header read does not see it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXIF_HEADER = b"Exif\x00\x00"
ORIENTATION_TAG = 0x0112


@dataclass(frozen=True)
class PngChunk:
    """One chunk: its 4-byte type, where its data starts in the file, and the length it declares."""

    tag: bytes
    offset: int
    length: int

    def data(self, png: bytes) -> bytes:
        """The chunk's data in ``png`` (shorter than ``length`` in a truncated file)."""
        return png[self.offset: self.offset + self.length]


def png_chunks(data: bytes) -> Iterator[PngChunk]:
    """The chunks of ``data``, in order, up to and including IEND or the end of the bytes; nothing
    for a file that is not a PNG. CRCs are not checked (the decoder does that)."""
    if not data.startswith(PNG_SIGNATURE):
        return
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, tag = struct.unpack_from(">I4s", data, pos)
        yield PngChunk(tag, pos + 8, length)
        if tag == b"IEND":
            return
        pos += 12 + length


def stored_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) as the IHDR stores them, or None for bytes too short or not a PNG."""
    if not data.startswith(PNG_SIGNATURE) or len(data) < 24:
        return None
    width, height = struct.unpack_from(">II", data, 16)
    return width, height


def late_exif_orientation(data: bytes) -> int | None:
    """The EXIF orientation (1-8) of the last eXIf chunk after the first IDAT, or None: no such
    chunk, an unreadable one (the decoder ignores it too), or a value outside 1-8."""
    from PIL import Image

    seen_idat, late = False, None
    for chunk in png_chunks(data):
        if chunk.tag == b"IDAT":
            seen_idat = True
        elif chunk.tag == b"eXIf" and seen_idat:
            late = chunk.data(data)
    if late is None:
        return None
    exif = Image.Exif()
    try:
        exif.load(late if late.startswith(EXIF_HEADER) else EXIF_HEADER + late)
        value = exif.get(ORIENTATION_TAG, 1)
    except Exception:  # noqa: BLE001 - unreadable EXIF: the decoder ignores it too
        return None
    return value if isinstance(value, int) and 1 <= value <= 8 else None
