"""``look`` (photo's weights blended with photo-natural's, alone and under ``denoise``), on tiny random
networks saved under the real names, and on a copy of the shipped photo-x2 with a perturbed twin."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from sr import DEFAULT_MODEL, NATURAL_MODEL, PHOTO_MODEL
from sr.inference import UpscaleError, Upscaler, parse_look
from sr.inference.model_choice import check_look, choose
from sr.io import read_image
from sr.lossy import Compression
from sr.weights import WEIGHTS_DIR, describe, load_look, loaded, save_weights


@pytest.fixture(scope="module")
def folder(tmp_path_factory, make_tiny_net) -> Path:
    """asa-base and photo at x2 and x3, photo-natural at x2 only (one architecture, other weights)."""
    out = tmp_path_factory.mktemp("look-weights")
    for scale in (2, 3):
        save_weights(make_tiny_net(scale, seed=scale), out / f"{DEFAULT_MODEL}-x{scale}.safetensors")
        save_weights(make_tiny_net(scale, seed=10 + scale), out / f"{PHOTO_MODEL}-x{scale}.safetensors")
    save_weights(make_tiny_net(2, seed=20), out / f"{NATURAL_MODEL}-x2.safetensors")
    return out


def _encoded(fmt: str, **options) -> bytes:
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format=fmt, **options)
    return buf.getvalue()


def _engine(folder: Path, model: str, **kwargs) -> Upscaler:
    return Upscaler(model, device="cpu", threads=1, tile=0, weights_dir=folder, precision="fp32", **kwargs)


def _state(folder: Path, name: str) -> dict[str, torch.Tensor]:
    return loaded(describe(folder / f"{name}.safetensors")).net.state_dict()


def test_look_ends_are_photo_and_photo_natural_exactly_and_between_is_neither(folder) -> None:
    from sr.weights import blended_state

    img = read_image(_encoded("PNG"))
    photo = _engine(folder, PHOTO_MODEL).upscale(img)
    natural = _engine(folder, NATURAL_MODEL).upscale(img)  # photo-natural is a family of its own
    assert natural.model == "photo-natural-x2"
    assert not np.array_equal(photo.image.pixels, natural.image.pixels)
    misses = blended_state.cache_info().misses
    at0 = _engine(folder, PHOTO_MODEL, look=0).upscale(img)
    assert blended_state.cache_info().misses == misses  # look 0 blends nothing: photo's own file
    assert at0.model == "photo-x2" and at0.image.pixels.tobytes() == photo.image.pixels.tobytes()
    at1 = _engine(folder, PHOTO_MODEL, look=1).upscale(img)
    np.testing.assert_array_equal(at1.image.pixels, natural.image.pixels)
    half = _engine(folder, PHOTO_MODEL, look=0.5).upscale(img)
    assert half.model == "photo-x2@look=0.5"
    assert not np.array_equal(half.image.pixels, photo.image.pixels)
    assert not np.array_equal(half.image.pixels, natural.image.pixels)


def test_half_look_weights_are_the_mean_and_compose_under_denoise(folder) -> None:
    base, photo = _state(folder, f"{DEFAULT_MODEL}-x2"), _state(folder, f"{PHOTO_MODEL}-x2")
    natural = _state(folder, f"{NATURAL_MODEL}-x2")
    key = next(k for k, v in photo.items() if v.is_floating_point() and v.numel() > 1)
    half = _engine(folder, PHOTO_MODEL, look=0.5).network(2).state_dict()
    torch.testing.assert_close(half[key], (photo[key] + natural[key]) / 2, rtol=0, atol=1e-7)
    # (1 - D) * default + D * ((1 - L) * photo + L * photo-natural)
    d, look = 0.4, 0.25
    both = _engine(folder, PHOTO_MODEL, denoise=d, look=look)
    expected = (1 - d) * base[key] + d * ((1 - look) * photo[key] + look * natural[key])
    torch.testing.assert_close(both.network(2).state_dict()[key], expected, rtol=0, atol=1e-7)
    assert both.upscale(read_image(_encoded("PNG"))).model == "photo-x2@denoise=0.4,look=0.25"
    # denoise 0 is the default family's weights exactly, whatever the look
    at_d0 = _engine(folder, PHOTO_MODEL, denoise=0, look=0.5).network(2).state_dict()
    assert all(at_d0[k].equal(base[k]) for k in base)


def test_load_look_is_cached_per_files_and_look(folder) -> None:
    from sr.weights import blended_state

    photo, natural = folder / f"{PHOTO_MODEL}-x2.safetensors", folder / f"{NATURAL_MODEL}-x2.safetensors"
    first = load_look(photo, natural, 0.3)
    assert first.name == "photo-x2@look=0.3" and json.loads(first.meta["look"])["amount"] == 0.3
    hits = blended_state.cache_info().hits
    load_look(photo, natural, 0.3)
    assert blended_state.cache_info().hits == hits + 1
    with pytest.raises(ValueError, match=r"look must be a number in \[0, 1\]"):
        load_look(photo, natural, 1.5)


def test_auto_applies_the_look_to_its_photo_side_only(folder) -> None:
    img = read_image(_encoded("PNG"))
    auto = _engine(folder, "auto", look=1)
    natural = _engine(folder, NATURAL_MODEL).upscale(img).image.pixels
    lossy = auto.upscale(img, source=_encoded("JPEG", quality=70))
    np.testing.assert_array_equal(lossy.image.pixels, natural)
    assert lossy.model == "photo-x2@look=1" and lossy.choice.describe().startswith("auto: photo, look 1 (")
    lossless = auto.upscale(img, source=_encoded("PNG"))
    base = _engine(folder, DEFAULT_MODEL).upscale(img).image.pixels
    assert lossless.model == "asa-base-x2" and lossless.choice.describe() == "auto: asa-base (PNG, lossless)"
    np.testing.assert_array_equal(lossless.image.pixels, base)
    # fidelity-first unless asked: no look given is look 0
    assert _engine(folder, "auto").upscale(img, source=_encoded("JPEG", quality=70)).model == "photo-x2"
    assert choose(Compression("JPEG", True, 40)).look == 0
    assert choose(Compression("PNG", False), look=0.5).look is None


def test_a_scale_photo_natural_lacks_is_refused_when_a_pass_needs_it(folder) -> None:
    engine = _engine(folder, PHOTO_MODEL, look=0.5)  # x2 works, x3 does not
    assert engine.scales == [2, 3] and engine.plan_size(4, 4, scale=2)[1] == [2]
    for call in (lambda: engine.plan_size(4, 4, scale=3), lambda: engine.plan_size(4, 4, outscale=3),
                 lambda: engine.network(3)):
        with pytest.raises(UpscaleError, match="photo-natural has no x3 weights"):
            call()
    with pytest.raises(UpscaleError, match="photo-natural has no x3 weights"):
        _engine(folder, "auto", look=0.5).plan_size(4, 4, scale=3)
    assert _engine(folder, PHOTO_MODEL).plan_size(4, 4, scale=3)[1] == [3]  # look 0: photo at every scale


def test_look_needs_photo_or_auto_and_photo_natural(folder, tmp_path) -> None:
    for model in (DEFAULT_MODEL, NATURAL_MODEL, str(folder / f"{PHOTO_MODEL}-x2.safetensors")):
        with pytest.raises(UpscaleError, match="look applies only to the models photo and auto"):
            _engine(folder, model, look=0.5)
    with pytest.raises(UpscaleError, match="look must be a number from 0 to 1"):
        _engine(folder, PHOTO_MODEL, look=2)
    lone = tmp_path / "lone"
    lone.mkdir()
    name = f"{PHOTO_MODEL}-x2.safetensors"
    (lone / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(UpscaleError, match="look blends photo with photo-natural: unknown model"):
        _engine(lone, PHOTO_MODEL, look=0.5)
    assert _engine(lone, PHOTO_MODEL, look=0).scales == [2]  # look 0 needs no photo-natural
    assert check_look(PHOTO_MODEL, None) == 0 and check_look(DEFAULT_MODEL, None) is None


@pytest.mark.parametrize("value", [2, -1, 1.01, math.nan, math.inf, "abc", "", True, None, [0.5]])
def test_bad_look_values(value) -> None:
    with pytest.raises(ValueError, match="look must be a number from 0 to 1"):
        parse_look(value)


def test_shipped_photo_with_a_perturbed_twin(tmp_path) -> None:
    """The shipped photo-x2 and a perturbed copy saved as photo-natural-x2 with the same metadata:
    look 1 is the copy's output exactly, look 0 photo's (nothing here depends on the real photo-natural)."""
    shipped = WEIGHTS_DIR / f"{PHOTO_MODEL}-x2.safetensors"
    if not shipped.is_file():
        pytest.skip("no shipped photo-x2")
    (tmp_path / shipped.name).write_bytes(shipped.read_bytes())
    with safe_open(str(shipped), framework="pt") as f:
        meta = f.metadata()
    gen = torch.Generator().manual_seed(0)
    twin = {k: v + 0.01 * torch.randn(v.shape, generator=gen, dtype=v.dtype) if v.is_floating_point() else v
            for k, v in load_file(str(shipped)).items()}
    save_file(twin, str(tmp_path / f"{NATURAL_MODEL}-x2.safetensors"), metadata=meta)
    img = read_image(_encoded("PNG"))
    photo = _engine(tmp_path, PHOTO_MODEL).upscale(img).image.pixels
    natural = _engine(tmp_path, NATURAL_MODEL).upscale(img).image.pixels
    np.testing.assert_array_equal(_engine(tmp_path, PHOTO_MODEL, look=1).upscale(img).image.pixels, natural)
    assert _engine(tmp_path, PHOTO_MODEL, look=0).upscale(img).image.pixels.tobytes() == photo.tobytes()
    assert not np.array_equal(photo, natural)
