"""How an image file was compressed, read from the file itself: JPEG quality and lossy WebP.

The quality a JPEG was saved at is not stored in the file, but its quantisation tables are, and every
libjpeg-family encoder (Pillow, browsers, most apps) scales the IJG reference tables by quality. We
encode a tiny image at each quality 1..100 once, read back Pillow's own tables, and pick the quality
whose luminance table is nearest the file's (in log ratio, so large and small steps weigh alike).
Camera and Photoshop tables are not IJG's; the estimate is then the IJG quality of similar strength.

A lossy WebP is one VP8 key frame; its quality is not stored either, but the quantiser indices libwebp
derived from it are, in the frame header. We read them with a small boolean decoder (RFC 6386) and look the
figure up in a table measured once from Pillow's encoder (see _WEBP_QUANTIZER_BY_QUALITY).
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
    """What a file's own bytes say: its format, whether it is lossy, and a JPEG's or lossy WebP's estimated
    quality."""

    format: str  # Pillow's name: JPEG, PNG, WEBP, ...
    lossy: bool
    jpeg_quality: int | None = None
    webp_quality: int | None = None  # libwebp's 0-100 quality, estimated from the quantisers

    @property
    def estimated_quality(self) -> int | None:
        return self.jpeg_quality if self.jpeg_quality is not None else self.webp_quality

    def describe(self) -> str:
        if self.jpeg_quality is not None:
            return f"JPEG, quality ~{self.jpeg_quality}"
        if self.lossy and self.webp_quality is not None:
            return f"WebP, quality ~{self.webp_quality}"
        return f"{self.format}, {'lossy' if self.lossy else 'lossless'}"


# The typical webp_base_quantizer of a lossy WebP saved at libwebp quality 0..100 (index = quality).
# libwebp maps quality to quantisers by formula, but spatial noise shaping moves each segment's quantiser by
# how busy the image is, so the figure a file shows depends a little on content; hence measured, not derived.
# Method: 20 images shipped with scikit-image 0.26 (astronaut, camera, coffee, chelsea, rocket,
# immunohistochemistry, hubble_deep_field, brick, grass, gravel, page, text, coins, moon, horse, logo,
# colorwheel, cell, clock, retina; greyscale ones as RGB, the two over 1024 px halved first), each at full
# size, 1/2 and 1/4 (Lanczos), saved by Pillow 13.0 (libwebp 1.6.0, default settings: method 4, sns 50,
# 4 segments) at every quality 0..100; an entry is the median figure over those 60 files. Read back through
# this table, qualities 80-100 come out within +-4 (+-3 at 88-100; 0-79 within +-17, the curve being flat
# near 70), and no file saved at <= 90 reads as >= 93 (92 at most), nor one saved at >= 95 as < 93 (94 at
# least). Other libwebp front ends (cwebp, browsers) share these defaults; an encoder with other noise
# shaping settings reads as a quality of similar strength.
_WEBP_QUANTIZER_BY_QUALITY: tuple[float, ...] = (
    127, 101, 95.5, 91.25, 88, 85.5, 83.25, 81, 79, 77.25,  # 0-9
    75.5, 73.75, 72.5, 70.75, 69.75, 68.5, 67, 66, 65, 64,  # 10-19
    62.5, 61.5, 60.5, 59.75, 58.75, 58, 57, 56, 55.25, 54.5,  # 20-29
    53.5, 52.75, 52, 51, 50.25, 50, 49.25, 48.5, 47.5, 47,  # 30-39
    46, 45.75, 45, 44.25, 43.5, 42.75, 42.5, 41.75, 41, 40.25,  # 40-49
    40, 39.5, 38.5, 38.5, 37.5, 37, 36.75, 36, 35.5, 35,  # 50-59
    34.5, 33.75, 33.5, 33, 32, 32, 31.25, 30.5, 30.5, 29.75,  # 60-69
    29.5, 29, 28.25, 28, 27.5, 27, 25.5, 24.25, 22.75, 22,  # 70-79
    20.5, 19.5, 18, 17, 15.5, 15, 13.5, 12.5, 11, 10.5,  # 80-89
    9, 8, 7.5, 6, 5, 4.5, 3.5, 2, 1.5, 0.5,  # 90-99
    0,  # 100
)


def _webp_image_chunk(data: bytes) -> tuple[bytes, bytes] | None:
    """The first image chunk of a WebP file: its tag ('VP8 ' or 'VP8L') and payload (short if truncated)."""
    # RIFF container: extended files ('VP8X') carry the image chunk after others (ICCP, ALPH, ...), animated
    # ones inside their 'ANMF' frame chunks (16 bytes of frame header, then the frame's chunks)
    pos = 12
    while pos + 8 <= len(data):
        tag, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        if tag in (b"VP8 ", b"VP8L"):
            return tag, data[pos + 8 : pos + 8 + size]
        pos += 8 + 16 if tag == b"ANMF" else 8 + size + (size & 1)
    return None


def _webp_is_lossy(data: bytes) -> bool:
    # a 'VP8 ' chunk is lossy, 'VP8L' lossless
    chunk = _webp_image_chunk(data)
    return chunk is not None and chunk[0] == b"VP8 "


class _BoolDecoder:
    """RFC 6386's boolean entropy decoder (section 7.3), enough to read a VP8 frame header."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 2
        self.value = int.from_bytes(data[:2], "big")  # a 2-byte window on the arithmetic-coded value
        self.range, self.bit_count = 255, 0

    def bool(self, prob: int) -> int:
        split = 1 + (((self.range - 1) * prob) >> 8)
        if self.value >= split << 8:
            bit, self.range, self.value = 1, self.range - split, self.value - (split << 8)
        else:
            bit, self.range = 0, split
        while self.range < 128:  # renormalise, shifting in a new byte every 8 bits
            self.value, self.range, self.bit_count = self.value << 1, self.range << 1, self.bit_count + 1
            if self.bit_count == 8:
                # past the end reads zeros, as libvpx does (the caller checked the partition is all there)
                self.value |= self.data[self.pos] if self.pos < len(self.data) else 0
                self.pos, self.bit_count = self.pos + 1, 0
        return bit

    def literal(self, bits: int) -> int:  # L(n): unsigned, most significant bit first
        value = 0
        for _ in range(bits):
            value = (value << 1) | self.bool(128)
        return value

    def signed(self, bits: int) -> int:  # magnitude, then a sign bit
        value = self.literal(bits)
        return -value if self.bool(128) else value

    def optional_signed(self, bits: int) -> int | None:  # a presence flag, then a signed value
        return self.signed(bits) if self.bool(128) else None


def _vp8_frame_quantizers(chunk: bytes) -> tuple[int, list[int] | None] | None:
    """A VP8 keyframe's base luma AC quantiser index (y_ac_qi, 0-127) and its segments' absolute quantisers
    (None without segmentation), read from the frame header (RFC 6386 sections 9.2-9.6, 19.2).
    None when the chunk is not a whole, well-formed keyframe header."""
    if len(chunk) < 10:
        return None
    tag = int.from_bytes(chunk[:3], "little")
    key_frame, version, first_part_size = not tag & 1, (tag >> 1) & 7, tag >> 5
    if not key_frame or version > 3 or chunk[3:6] != b"\x9d\x01\x2a" or 10 + first_part_size > len(chunk):
        return None  # an inter frame (never in WebP), a bad start code or a truncated first partition
    d = _BoolDecoder(chunk[10 : 10 + first_part_size])
    d.literal(2)  # color_space, clamping_type
    segment_q: list[int] | None = None  # the segments' quantisers: absolute, or deltas on y_ac_qi
    absolute = True
    if d.bool(128):  # segmentation_enabled
        update_map, update_data = d.bool(128), d.bool(128)
        if update_data:
            absolute = bool(d.bool(128))  # segment_feature_mode
            segment_q = [d.optional_signed(7) or 0 for _ in range(4)]  # an absent quantiser is 0
            for _ in range(4):
                d.optional_signed(6)  # loop filter level
        if update_map:
            for _ in range(3):
                if d.bool(128):
                    d.literal(8)  # segment tree probability
    d.literal(1 + 6 + 3)  # filter_type, loop_filter_level, sharpness_level
    if d.bool(128) and d.bool(128):  # loop_filter_adj_enable, mode_ref_lf_delta_update
        for _ in range(8):
            d.optional_signed(6)  # ref_frame and mb_mode deltas
    d.literal(2)  # log2_nbr_of_dct_partitions
    y_ac_qi = d.literal(7)
    # (5 optional deltas for the other coefficient kinds follow; quality sets the luma AC index they offset)
    if segment_q is not None:  # clamped as a decoder does
        segment_q = [min(max(q if absolute else y_ac_qi + q, 0), 127) for q in segment_q]
    return y_ac_qi, segment_q


def webp_base_quantizer(data: bytes) -> float | None:
    """The quantiser index (0 finest .. 127 coarsest) a lossy WebP's encoder quality set, from its first
    'VP8 ' chunk's frame header; None for a lossless, truncated or malformed file.

    libwebp derives each of its (up to 4) segments' luma AC quantiser from quality, spread above and below
    by how busy the segment is (spatial noise shaping). The outermost segments mark the ends of that spread
    whatever the middle ones do, so the midpoint of the range follows quality more closely than the mean:
    over the table's 60 files its worst error at qualities 80-100 is 4 against 6, and the mean reads busy
    textures saved at 90 as 93. Without segmentation: the frame's y_ac_qi."""
    chunk = _webp_image_chunk(data)
    if chunk is None or chunk[0] != b"VP8 ":
        return None
    header = _vp8_frame_quantizers(chunk[1])
    if header is None:
        return None
    y_ac_qi, segment_q = header
    return (min(segment_q) + max(segment_q)) / 2 if segment_q else float(y_ac_qi)


def webp_quality_from_quantizer(quantizer: float) -> int:
    """The libwebp quality (0-100) whose typical :func:`webp_base_quantizer` is nearest ``quantizer``."""
    dist = np.abs(np.asarray(_WEBP_QUANTIZER_BY_QUALITY) - quantizer)
    return int(np.argmin(dist))  # a tie goes to the lower quality


def inspect_compression(source: str | Path | bytes) -> Compression:
    """The compression of an image file or its bytes (headers only; no pixels are decoded)."""
    data = Path(source).read_bytes() if not isinstance(source, bytes) else source
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        # read straight from the RIFF chunks: Pillow would not even open a truncated WebP
        quantizer = webp_base_quantizer(data)
        quality = None if quantizer is None else webp_quality_from_quantizer(quantizer)
        return Compression("WEBP", _webp_is_lossy(data), webp_quality=quality)
    with Image.open(io.BytesIO(data)) as im:
        fmt = im.format or "unknown"
        if fmt in ("JPEG", "MPO"):
            tables = getattr(im, "quantization", None) or {}
            quality = jpeg_quality_from_tables(tables) if 0 in tables else None
            return Compression("JPEG", True, quality)
    return Compression(fmt, False)
