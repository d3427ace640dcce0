"""sr.lossy: JPEG quality read from the quantisation tables; lossy vs lossless WebP; PNG."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from sr.lossy import Compression, inspect_compression, jpeg_quality_from_tables


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
    assert lossy == Compression("WEBP", True) and lossy.describe() == "WEBP, lossy"
    assert lossless == Compression("WEBP", False) and lossless.describe() == "WEBP, lossless"


@pytest.mark.parametrize("lossless", [False, True])
def test_animated_webp_is_judged_by_its_frames(image: Image.Image, lossless: bool) -> None:
    other = Image.fromarray(np.asarray(image)[::-1].copy())
    data_ = _encode(image, "WEBP", save_all=True, append_images=[other], lossless=lossless, quality=80)
    assert data_[12:16] == b"VP8X"  # the extended format, frames in ANMF chunks
    assert inspect_compression(data_).lossy is not lossless


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
