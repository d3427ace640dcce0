"""A TIFF's structure, walked without Pillow: the header as Pillow reads it, the chain of image file
directories (IFDs), and the tags of the first one that decide its decode cost and pixel layout.

Every header Pillow opens is read its way (:data:`~sr.io.formats.TIFF_MAGIC`): the byte order is
that of the first two bytes, BigTIFF (8-byte counts and offsets, 20-byte entries) is a third byte
of ``+``; so ``MM\\0+`` is read as a classic header, as Pillow reads it. Nothing here raises on
a short or damaged file: the walk says what it found and where it stopped.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .formats import TIFF_MAGIC

STRIP_OFFSETS = 273
TILE_OFFSETS = 324
BITS_PER_SAMPLE = 258
SAMPLES_PER_PIXEL = 277
SAMPLE_FORMAT = 339
# Bytes per value of the TIFF field types whose values are integers (BYTE, SHORT, LONG, LONG8 and
# their signed kinds, IFD, IFD8).
_INT_TYPES = {1: "B", 3: "H", 4: "I", 6: "b", 8: "h", 9: "i", 13: "I", 16: "Q", 17: "q", 18: "Q"}
_SAMPLE_KINDS = {1: "unsigned integer", 2: "signed integer", 3: "floating point", 4: "undefined",
                 5: "complex integer", 6: "complex floating point"}


@dataclass(frozen=True)
class Header:
    order: str    # "<" (II) or ">" (MM)
    big: bool     # BigTIFF
    first: int    # offset of the first directory

    @property
    def count_size(self) -> int:
        return 8 if self.big else 2

    @property
    def entry_size(self) -> int:
        return 20 if self.big else 12

    @property
    def offset_size(self) -> int:
        return 8 if self.big else 4


@dataclass(frozen=True)
class Entry:
    tag: int
    type: int
    count: int
    value: bytes  # the value itself when it fits (4 bytes, 8 in BigTIFF), else its offset


@dataclass
class Directory:
    """One IFD: where it is, the entries it declares and how many the file holds, its entries when
    asked for, and the next directory's offset (None: the directory runs past the end)."""

    offset: int
    declared: int
    present: int
    next: int | None
    entries: dict[int, Entry] = field(default_factory=dict)


def header(data: bytes) -> Header | None:
    """The header as Pillow reads it, or None: not a TIFF, or too short for its header."""
    if not data.startswith(TIFF_MAGIC):
        return None
    order = "<" if data[:2] == b"II" else ">"
    big = data[2] == 0x2B
    if len(data) < (16 if big else 8):
        return None
    first = struct.unpack_from(order + ("Q" if big else "I"), data, 8 if big else 4)[0]
    return Header(order, big, first)


def directory(data: bytes, head: Header, offset: int, with_entries: bool = False,
              max_entries: int = 4096) -> Directory | None:
    """The IFD at ``offset``, or None when its entry count lies past the end. ``with_entries``
    reads its first ``max_entries`` entries (Pillow keeps the first of a repeated tag)."""
    o = head.order
    if offset + head.count_size > len(data):
        return None
    declared = struct.unpack_from(o + ("Q" if head.big else "H"), data, offset)[0]
    start = offset + head.count_size
    present = min(declared, (len(data) - start) // head.entry_size)
    end = start + declared * head.entry_size
    next_offset = None
    if present == declared and end + head.offset_size <= len(data):
        next_offset = struct.unpack_from(o + ("Q" if head.big else "I"), data, end)[0]
    ifd = Directory(offset, declared, present, next_offset)
    if with_entries:
        layout = o + ("HHQ8s" if head.big else "HHI4s")
        for i in range(min(present, max_entries)):
            tag, kind, count, value = struct.unpack_from(layout, data, start + i * head.entry_size)
            ifd.entries.setdefault(tag, Entry(tag, kind, count, value))
    return ifd


def values(data: bytes, head: Header, entry: Entry | None, limit: int = 16) -> tuple[int, ...]:
    """Up to ``limit`` integer values of ``entry`` (inline or out of line); () for a missing entry,
    a type that holds no integers, or values past the end of the file."""
    if entry is None or entry.type not in _INT_TYPES:
        return ()
    code = _INT_TYPES[entry.type]
    n = min(entry.count, limit)
    size = struct.calcsize(code)
    if entry.count * size <= len(entry.value):
        raw, at = entry.value, 0
    else:
        raw = data
        at = struct.unpack_from(head.order + ("Q" if head.big else "I"), entry.value)[0]
    if at + n * size > len(raw):
        return ()
    return struct.unpack_from(f"{head.order}{n}{code}", raw, at)


def sample_layout(data: bytes) -> str | None:
    """The first directory's samples in words ("3 samples of 32-bit floating point"), or None when
    the file has no readable first directory."""
    head = header(data)
    ifd = directory(data, head, head.first, with_entries=True) if head else None
    if head is None or ifd is None:
        return None
    samples = (values(data, head, ifd.entries.get(SAMPLES_PER_PIXEL)) or (1,))[0]
    bits = values(data, head, ifd.entries.get(BITS_PER_SAMPLE)) or (1,)
    kinds = values(data, head, ifd.entries.get(SAMPLE_FORMAT)) or (1,)
    width = "/".join(str(b) for b in sorted(set(bits)))
    kind = "/".join(_SAMPLE_KINDS.get(k, f"sample format {k}") for k in sorted(set(kinds)))
    return f"{samples} sample{'s' if samples != 1 else ''} of {width}-bit {kind}"
