"""sr.lossy: JPEG quality read from the quantisation tables; lossy vs lossless WebP and a lossy WebP's
quality read from its VP8 frame header; PNG."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from sr.lossy import (
    Compression,
    inspect_compression,
    jpeg_quality_from_tables,
    webp_base_quantizer,
    webp_quality_from_quantizer,
)


@pytest.fixture(scope="module")
def image() -> Image.Image:
    return Image.fromarray(data.astronaut()[:96, :128])


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


@pytest.mark.parametrize("quality", [5, 10, 25, 30, 50, 55, 70, 75, 85, 90, 95, 98, 100])
def test_jpeg_quality_is_read_back(image: Image.Image, quality: int) -> None:
    data_ = _encode(image, "JPEG", quality=quality)
    c = inspect_compression(data_)
    assert c == Compression("JPEG", True, quality)
    assert c.describe() == f"JPEG, quality ~{quality}"
    with Image.open(io.BytesIO(data_)) as im:
        assert jpeg_quality_from_tables(im.quantization) == quality


@pytest.mark.parametrize("variant", [
    dict(subsampling=0), dict(progressive=True), dict(optimize=True), dict(mode="L"),
])
def test_jpeg_quality_whatever_the_encoder_options(image: Image.Image, variant: dict) -> None:
    im = image.convert(variant.pop("mode")) if "mode" in variant else image
    assert inspect_compression(_encode(im, "JPEG", quality=63, **variant)).jpeg_quality == 63


def test_paths_and_bytes_alike(image: Image.Image, tmp_path: Path) -> None:
    path = tmp_path / "photo.jpg"
    path.write_bytes(_encode(image, "JPEG", quality=42))
    from_bytes = inspect_compression(path.read_bytes())
    assert inspect_compression(path) == inspect_compression(str(path)) == from_bytes
    assert inspect_compression(path).jpeg_quality == 42


def test_non_ijg_tables_map_to_a_quality_of_similar_strength(image: Image.Image) -> None:
    # a flat table of 8s (no encoder's preset) sits between IJG's strong and weak settings
    flat = _encode(image, "JPEG", qtables=[[8] * 64, [8] * 64])
    q = inspect_compression(flat).jpeg_quality
    assert 70 < q < 95


def test_tables_without_luminance_are_an_error() -> None:
    with pytest.raises(ValueError, match="luminance"):
        jpeg_quality_from_tables({1: [1] * 64})
    with pytest.raises(ValueError, match="luminance"):
        jpeg_quality_from_tables({0: [1] * 63})


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_webp_lossy_or_lossless(image: Image.Image, mode: str) -> None:
    im = image.convert(mode)
    lossy = inspect_compression(_encode(im, "WEBP", quality=80))
    lossless = inspect_compression(_encode(im, "WEBP", lossless=True))
    assert lossy.lossy and lossy.jpeg_quality is None and abs(lossy.webp_quality - 80) <= 4
    assert lossless == Compression("WEBP", False) and lossless.describe() == "WEBP, lossless"
    assert lossless.webp_quality is None and lossless.estimated_quality is None


@pytest.mark.parametrize("lossless", [False, True])
def test_animated_webp_is_judged_by_its_frames(image: Image.Image, lossless: bool) -> None:
    other = Image.fromarray(np.asarray(image)[::-1].copy())
    data_ = _encode(image, "WEBP", save_all=True, append_images=[other], lossless=lossless, quality=80)
    assert data_[12:16] == b"VP8X"  # the extended format, frames in ANMF chunks
    c = inspect_compression(data_)
    assert c.lossy is not lossless
    assert (c.webp_quality is None) if lossless else abs(c.webp_quality - 80) <= 4  # the first frame's


# measured worst error of the estimate over 60 test encodes (see sr.lossy._WEBP_QUANTIZER_BY_QUALITY)
_WEBP_TOLERANCE = {50: 17, 80: 4, 85: 4, 90: 3, 95: 3, 98: 3, 100: 0}


@pytest.mark.parametrize("quality", sorted(_WEBP_TOLERANCE))
def test_webp_quality_is_estimated(image: Image.Image, quality: int) -> None:
    c = inspect_compression(_encode(image, "WEBP", quality=quality))
    assert c.format == "WEBP" and c.lossy and c.jpeg_quality is None
    assert abs(c.webp_quality - quality) <= _WEBP_TOLERANCE[quality]
    assert c.estimated_quality == c.webp_quality
    assert c.describe() == f"WebP, quality ~{c.webp_quality}"


@pytest.mark.parametrize("name", ["astronaut", "camera", "grass"])  # grass: busy texture, the hardest case
def test_webp_near_lossless_is_told_from_ordinary(name: str) -> None:
    im = Image.fromarray(getattr(data, name)()[:128, :128]).convert("RGB")
    for quality in (80, 85, 88, 90):
        assert inspect_compression(_encode(im, "WEBP", quality=quality)).webp_quality < 93, quality
    for quality in (95, 98, 100):
        assert inspect_compression(_encode(im, "WEBP", quality=quality)).webp_quality >= 93, quality


def test_webp_quantizer_ends_of_the_scale(image: Image.Image) -> None:
    assert webp_base_quantizer(_encode(image, "WEBP", quality=0)) == 127
    assert webp_base_quantizer(_encode(image, "WEBP", quality=100)) == 0
    assert webp_quality_from_quantizer(127) == 0 and webp_quality_from_quantizer(0) == 100
    assert webp_base_quantizer(_encode(image, "WEBP", lossless=True)) is None
    assert webp_base_quantizer(_encode(image, "JPEG")) is None


@pytest.mark.parametrize("extra", ["alpha", "exif"])
def test_extended_webp_is_read_past_its_other_chunks(image: Image.Image, extra: str) -> None:
    if extra == "alpha":  # real transparency, so the encoder keeps an ALPH chunk
        rgba = np.asarray(image.convert("RGBA")).copy()
        rgba[:, :64, 3] = 0
        data_ = _encode(Image.fromarray(rgba), "WEBP", quality=90)
    else:
        data_ = _encode(image, "WEBP", quality=90, exif=b"Exif\0\0" + bytes(20))
    assert data_[12:16] == b"VP8X" and b"VP8 " in data_[30:]
    c = inspect_compression(data_)
    assert c.lossy and abs(c.webp_quality - 90) <= 3


def test_truncated_or_damaged_webp_is_lossy_without_an_estimate(image: Image.Image) -> None:
    data_ = _encode(image, "WEBP", quality=80)
    assert data_[12:16] == b"VP8 "
    first_partition = int.from_bytes(data_[20:23], "little") >> 5
    cut = data_[: 20 + 10 + first_partition // 2]  # inside the first partition, the header's own bytes
    assert inspect_compression(cut) == Compression("WEBP", True)
    assert inspect_compression(cut).describe() == "WEBP, lossy"
    for n in range(12, len(data_)):  # cut anywhere: no exception; lossy once the chunk's header is whole
        c = inspect_compression(data_[:n])
        assert c.format == "WEBP" and c.lossy is (n >= 20)
        assert (c.webp_quality is not None) is (n >= 20 + 10 + first_partition)
    rng = np.random.default_rng(0)
    for _ in range(200):  # damaged frame headers: an estimate or None, never an exception
        bad = bytearray(data_)
        bad[20 + rng.integers(0, 30)] = rng.integers(0, 256)
        q = inspect_compression(bytes(bad)).webp_quality
        assert q is None or 0 <= q <= 100


class _BoolEncoder:
    """RFC 6386's boolean encoder (section 7.3) with Python's big integers, so carries need no care."""

    def __init__(self) -> None:
        self.low, self.range, self.shifts = 0, 255, 0

    def put(self, value: int, bits: int = 1, signed: bool = False, flag: bool = False) -> None:
        if flag:  # an optional field: its presence flag first
            self.put(value is not None)
            if value is None:
                return
        for bit in [(abs(value) >> i) & 1 for i in reversed(range(bits))] + ([value < 0] if signed else []):
            split = 1 + (((self.range - 1) * 128) >> 8)
            self.low, self.range = (self.low + split, self.range - split) if bit else (self.low, split)
            while self.range < 128:
                self.low, self.range, self.shifts = self.low << 1, self.range << 1, self.shifts + 1

    def webp(self) -> bytes:
        """A lossy WebP file whose first partition is what was put (and no macroblocks)."""
        nbits = 8 + self.shifts
        part = (self.low << (-nbits % 8)).to_bytes((nbits + 7) // 8, "big") + bytes(2)
        tag = (len(part) << 5) | (1 << 4)  # a key frame, version 0, shown
        frame = tag.to_bytes(3, "little") + b"\x9d\x01\x2a" + (16).to_bytes(2, "little") * 2 + part
        chunk = b"VP8 " + len(frame).to_bytes(4, "little") + frame + bytes(len(frame) & 1)
        return b"RIFF" + (4 + len(chunk)).to_bytes(4, "little") + b"WEBP" + chunk


@pytest.mark.parametrize("absolute, segment_q, expected", [
    (None, None, 40.0),                       # no segmentation: y_ac_qi
    (True, [20, None, 50, 35], (0 + 50) / 2),  # absolute, an absent one is 0
    (False, [-10, None, 5, 20], (30 + 60) / 2),  # deltas on y_ac_qi = 40
])
def test_frame_header_fields_libwebp_never_writes(absolute: bool | None, segment_q: list | None,
                                                  expected: float) -> None:
    e = _BoolEncoder()
    e.put(0, 2)  # color_space, clamping_type
    e.put(absolute is not None)  # segmentation_enabled
    if absolute is not None:
        e.put(1), e.put(1), e.put(absolute)  # update_mb_segmentation_map, update_segment_feature_data, mode
        for q in segment_q:
            e.put(q, 7, signed=True, flag=True)
        for level in (3, None, -2, 63):
            e.put(level, 6, signed=True, flag=True)
        for prob in (200, None, 7):
            e.put(prob, 8, flag=True)
    e.put(1), e.put(33, 6), e.put(5, 3)  # filter_type, loop_filter_level, sharpness_level
    e.put(1), e.put(1)  # loop_filter_adj_enable, mode_ref_lf_delta_update
    for delta in (2, None, -63, 0, None, 5, -1, 17):
        e.put(delta, 6, signed=True, flag=True)
    e.put(3, 2)  # log2_nbr_of_dct_partitions
    e.put(40, 7)  # y_ac_qi
    for delta in (None, -3, 15, None, 1):
        e.put(delta, 4, signed=True, flag=True)
    assert webp_base_quantizer(e.webp()) == expected
    assert inspect_compression(e.webp()).webp_quality == webp_quality_from_quantizer(expected)


def test_estimated_quality_whichever_the_format(image: Image.Image) -> None:
    jpeg = inspect_compression(_encode(image, "JPEG", quality=63))
    assert jpeg.estimated_quality == jpeg.jpeg_quality == 63 and jpeg.webp_quality is None
    webp = Compression("WEBP", True, webp_quality=91)
    assert webp.estimated_quality == 91 and webp.describe() == "WebP, quality ~91"
    assert Compression("WEBP", True).estimated_quality is None
    assert Compression("WEBP", True).describe() == "WEBP, lossy"
    assert Compression("PNG", False).estimated_quality is None


@pytest.mark.parametrize("fmt, kw", [("PNG", {}), ("BMP", {}), ("TIFF", {})])
def test_lossless_formats(image: Image.Image, fmt: str, kw: dict) -> None:
    c = inspect_compression(_encode(image, fmt, **kw))
    assert c == Compression(fmt, False) and c.describe() == f"{fmt}, lossless"
    gray16 = Image.fromarray(np.arange(64 * 64, dtype=np.uint16).reshape(64, 64) * 16)
    assert inspect_compression(_encode(gray16, "PNG")) == Compression("PNG", False)


def test_not_an_image_raises(tmp_path: Path) -> None:
    from PIL import UnidentifiedImageError

    with pytest.raises(UnidentifiedImageError):
        inspect_compression(b"not an image at all")
    with pytest.raises(FileNotFoundError):
        inspect_compression(tmp_path / "missing.jpg")
