"""How an image file was compressed, read from the file itself: JPEG quality and lossy WebP.

The quality a JPEG was saved at is not stored in the file, but its quantisation tables are, and every
libjpeg-family encoder (Pillow, browsers, most apps) scales the IJG reference tables by quality. We
encode a tiny image at each quality 1..100 once, read back Pillow's own tables, and pick the quality
whose luminance table is nearest the file's (in log ratio, so large and small steps weigh alike).
Camera and Photoshop tables are not IJG's; the estimate is then the IJG quality of similar strength.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image


@cache
def _ijg_luma_tables() -> np.ndarray:
    """(100, 64) luminance quantisation tables of Pillow's encoder at quality 1..100."""
    tiny = Image.new("RGB", (8, 8))
    rows = []
    for q in range(1, 101):
        buf = io.BytesIO()
        tiny.save(buf, format="JPEG", quality=q)
        with Image.open(buf) as im:
            rows.append(list(im.quantization[0]))
    return np.asarray(rows, dtype=np.float64)


def jpeg_quality_from_tables(tables: dict[int, list[int]]) -> int:
    """The IJG quality (1-100) whose luminance table is nearest ``tables[0]`` (Pillow's order)."""
    if 0 not in tables or len(tables[0]) != 64:
        raise ValueError("no 8x8 luminance quantisation table")
    luma = np.log(np.asarray(tables[0], dtype=np.float64).clip(1))
    dist = np.abs(np.log(_ijg_luma_tables().clip(1)) - luma).mean(axis=1)
    return int(np.argmin(dist)) + 1


@dataclass(frozen=True)
class Compression:
    """What a file's own bytes say: its format, whether it is lossy, and a JPEG's estimated quality."""

    format: str  # Pillow's name: JPEG, PNG, WEBP, ...
    lossy: bool
    jpeg_quality: int | None = None

    def describe(self) -> str:
        if self.jpeg_quality is not None:
            return f"JPEG, quality ~{self.jpeg_quality}"
        return f"{self.format}, {'lossy' if self.lossy else 'lossless'}"


def _webp_is_lossy(data: bytes) -> bool:
    # RIFF container: a 'VP8 ' chunk is lossy, 'VP8L' lossless; extended files ('VP8X') carry one of them,
    # animated ones inside their 'ANMF' frame chunks (16 bytes of frame header, then the frame's chunks)
    pos = 12
    while pos + 8 <= len(data):
        tag, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        if tag == b"VP8 ":
            return True
        if tag == b"VP8L":
            return False
        pos += 8 + 16 if tag == b"ANMF" else 8 + size + (size & 1)
    return False


def inspect_compression(source: str | Path | bytes) -> Compression:
    """The compression of an image file or its bytes (headers only; no pixels are decoded)."""
    data = Path(source).read_bytes() if not isinstance(source, bytes) else source
    with Image.open(io.BytesIO(data)) as im:
        fmt = im.format or "unknown"
        if fmt in ("JPEG", "MPO"):
            tables = getattr(im, "quantization", None) or {}
            quality = jpeg_quality_from_tables(tables) if 0 in tables else None
            return Compression("JPEG", True, quality)
        if fmt == "WEBP":
            return Compression(fmt, _webp_is_lossy(data))
    return Compression(fmt, False)
