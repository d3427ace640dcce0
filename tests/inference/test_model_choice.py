"""``auto`` (photo for lossy inputs, the default family for lossless ones) and ``denoise`` (photo's
weights blended with the default family's), on tiny random networks saved under the real names."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sr import DEFAULT_MODEL, NEAR_LOSSLESS_QUALITY, PHOTO_MODEL
from sr.inference import UpscaleError, Upscaler, parse_denoise
from sr.inference.model_choice import choose, compression_of
from sr.io import DecodedImage, read_image
from sr.lossy import Compression
from sr.weights import WeightsError, blend_state_dicts, describe, load_blend, loaded, save_weights


@pytest.fixture(scope="module")
def folder(tmp_path_factory, make_tiny_net) -> Path:
    """asa-base at x2 and x3, photo at x2 only (same architecture, other weights): auto runs at x2."""
    out = tmp_path_factory.mktemp("weights")
    for scale in (2, 3):
        save_weights(make_tiny_net(scale, seed=scale), out / f"{DEFAULT_MODEL}-x{scale}.safetensors")
    save_weights(make_tiny_net(2, seed=10), out / f"{PHOTO_MODEL}-x2.safetensors")
    save_weights(make_tiny_net(2, seed=11, channels=12), out / "wide-x2.safetensors")  # another architecture
    return out


def _encoded(fmt: str, **options) -> bytes:
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format=fmt, **options)
    return buf.getvalue()


def _engine(folder: Path, model: str, **kwargs) -> Upscaler:
    return Upscaler(model, device="cpu", threads=1, tile=0, weights_dir=folder, **kwargs)


@pytest.mark.parametrize("fmt, options, family, why", [
    ("JPEG", {"quality": 72}, PHOTO_MODEL, "JPEG, quality ~72"),
    ("JPEG", {"quality": NEAR_LOSSLESS_QUALITY - 1}, PHOTO_MODEL,
     f"JPEG, quality ~{NEAR_LOSSLESS_QUALITY - 1}"),
    ("JPEG", {"quality": NEAR_LOSSLESS_QUALITY}, DEFAULT_MODEL,
     f"JPEG, quality ~{NEAR_LOSSLESS_QUALITY}: nearly lossless"),
    ("JPEG", {"quality": 100}, DEFAULT_MODEL, "JPEG, quality ~100: nearly lossless"),
    # WebP's quality is estimated from the VP8 quantisers (sr.lossy; exact enough on this noise tile)
    ("WEBP", {"quality": 80}, PHOTO_MODEL, "WebP, quality ~81"),
    ("WEBP", {"quality": 90}, PHOTO_MODEL, "WebP, quality ~90"),
    ("WEBP", {"quality": 95}, DEFAULT_MODEL, "WebP, quality ~95: nearly lossless"),
    ("PNG", {}, DEFAULT_MODEL, "PNG, lossless"),
    ("WEBP", {"lossless": True}, DEFAULT_MODEL, "WEBP, lossless"),
])
def test_auto_picks_photo_for_lossy_files_and_the_default_for_lossless(
    folder, tmp_path, fmt, options, family, why
) -> None:
    data = _encoded(fmt, **options)
    path = tmp_path / f"input.{fmt.lower()}"
    path.write_bytes(data)
    up = _engine(folder, "auto")
    assert up.name == "auto" and up.scales == [2]  # the scales both sides have
    for source in (data, path, str(path)):
        assert up.choose(source).model == family
    result = up.upscale(read_image(data), source=data)
    assert result.choice is not None and result.choice.model == family
    assert result.choice.describe() == f"auto: {family} ({why})"
    assert result.model == f"{family}-x2"
    same = _engine(folder, family).upscale(read_image(data))
    np.testing.assert_array_equal(result.image.pixels, same.image.pixels)


def test_without_the_file_the_decoded_format_decides(folder) -> None:
    up = _engine(folder, "auto")
    pixels = np.full((8, 8, 3), 0.5, np.float32)
    assert up.upscale(DecodedImage(pixels, format="JPEG")).choice.model == PHOTO_MODEL
    assert up.upscale(DecodedImage(pixels, format="PNG")).choice.model == DEFAULT_MODEL
    assert up.choose(b"not an image", DecodedImage(pixels, format="PNG")).model == DEFAULT_MODEL
    assert compression_of(None) is None and choose(None).model == DEFAULT_MODEL
    described = choose(Compression("JPEG", True, 40), 0.25).describe()
    assert described == "auto: photo, denoise 0.25 (JPEG, quality ~40)"
    assert _engine(folder, DEFAULT_MODEL).choose(b"anything") is None  # only auto chooses


def test_denoise_ends_are_the_two_models_exactly_and_between_is_neither(folder) -> None:
    img = read_image(_encoded("PNG"))
    base = _engine(folder, DEFAULT_MODEL).upscale(img).image.pixels
    photo = _engine(folder, PHOTO_MODEL).upscale(img).image.pixels
    assert not np.array_equal(base, photo)
    at0 = _engine(folder, PHOTO_MODEL, denoise=0).upscale(img)
    at1 = _engine(folder, PHOTO_MODEL, denoise=1).upscale(img)
    np.testing.assert_array_equal(at0.image.pixels, base)
    np.testing.assert_array_equal(at1.image.pixels, photo)
    assert at0.model == "photo-x2@denoise=0" and at1.model == "photo-x2"
    half = _engine(folder, PHOTO_MODEL, denoise=0.5).upscale(img).image.pixels
    assert not np.array_equal(half, base) and not np.array_equal(half, photo)
    # auto's lossy side runs at the strength; its lossless side stays the default family
    auto = _engine(folder, "auto", denoise=0)
    np.testing.assert_array_equal(auto.upscale(img, source=_encoded("JPEG")).image.pixels, base)
    assert auto.upscale(img, source=_encoded("PNG")).model == f"{DEFAULT_MODEL}-x2"


def test_half_blend_weights_are_the_mean_and_are_cached(folder) -> None:
    base, photo = folder / f"{DEFAULT_MODEL}-x2.safetensors", folder / f"{PHOTO_MODEL}-x2.safetensors"
    a, b = loaded(describe(base)).net.state_dict(), loaded(describe(photo)).net.state_dict()
    got = load_blend(base, photo, 0.5).net.state_dict()
    assert got.keys() == a.keys()
    for key in a:
        torch.testing.assert_close(got[key], (a[key] + b[key]) / 2, rtol=0, atol=1e-7)
    engine_net = _engine(folder, PHOTO_MODEL, denoise=0.5).network(2)
    for key, value in engine_net.state_dict().items():
        torch.testing.assert_close(value, got[key], rtol=0, atol=0)
    from sr.weights import blended_state

    hits = blended_state.cache_info().hits
    load_blend(base, photo, 0.5)  # the same files and strength: computed once
    assert blended_state.cache_info().hits == hits + 1
    ends = blend_state_dicts(a, b, 0), blend_state_dicts(a, b, 1)
    assert all(ends[0][k].equal(a[k]) and ends[1][k].equal(b[k]) for k in a)


def test_blending_other_architectures_is_refused(folder) -> None:
    with pytest.raises(WeightsError, match="architectures differ"):
        load_blend(folder / f"{DEFAULT_MODEL}-x2.safetensors", folder / "wide-x2.safetensors", 0.5)


@pytest.mark.parametrize("value", [2, -1, -0.01, 1.5, math.nan, math.inf, "abc", "", True, None, [0.5]])
def test_bad_denoise_values(value) -> None:
    with pytest.raises(ValueError, match="denoise must be a number from 0 to 1"):
        parse_denoise(value)


def test_denoise_values_that_are_fine() -> None:
    assert [parse_denoise(v) for v in (0, 1, 0.25, "0.5", " 1 ", "0")] == [0.0, 1.0, 0.25, 0.5, 1.0, 0.0]


def test_denoise_needs_photo_or_auto_and_auto_needs_both_families(folder, tmp_path) -> None:
    for model in (DEFAULT_MODEL, "asa-base-x2", str(folder / f"{PHOTO_MODEL}-x2.safetensors")):
        with pytest.raises(UpscaleError, match="denoise applies only to the models photo and auto"):
            _engine(folder, model, denoise=0.5)
    with pytest.raises(UpscaleError, match="denoise must be a number"):
        _engine(folder, PHOTO_MODEL, denoise=1.5)
    assert _engine(folder, "photo-x2", denoise=0.5).denoise == 0.5
    assert _engine(folder, PHOTO_MODEL).denoise == 1.0 and _engine(folder, DEFAULT_MODEL).denoise is None
    lonely = tmp_path / "only-base"
    lonely.mkdir()
    name = f"{DEFAULT_MODEL}-x2.safetensors"
    (lonely / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(UpscaleError, match="unknown model 'photo'"):
        _engine(lonely, "auto")


def test_auto_scales_are_both_sides_common_scales_or_none():
    from sr.inference.model_choice import AUTO_SIDES, auto_scales

    lossless, lossy = AUTO_SIDES
    assert (lossless, lossy) == (DEFAULT_MODEL, PHOTO_MODEL)
    assert auto_scales({lossless: [4, 2, 3], lossy: (2, 4), "other": [3]}) == [2, 4]
    assert auto_scales({lossless: [3], lossy: [2]}) == []
    assert auto_scales({lossless: [2]}) == [] and auto_scales({}) == []
