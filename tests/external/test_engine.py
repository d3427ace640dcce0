"""Outside model files through sr's engine: recognised as spandrel recognises them, and sr's output is
spandrel's own call (untiled within 1e-5, tiled within 1e-3), for gray, RGBA and 1x models too;
``pre=`` chains a 1x model before an upscaler; ``precision="auto"`` runs bf16 only where the CPU and a
first-use check (cached per file) allow it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sr import weights as sr_weights
from sr.inference import UpscaleError, Upscaler
from sr.inference import precision as sr_precision
from sr.inference.resample import resize_to
from sr.io import DecodedImage
from tests.external.models import RESTORERS, UPSCALERS, photo, spandrel_call

spandrel = pytest.importorskip("spandrel", reason="the models extra: pip install -e '.[models]'")
# spandrel's SwinIR and HAT call torch.meshgrid without indexing=: torch's notice, not ours
pytestmark = pytest.mark.filterwarnings("ignore:torch.meshgrid:UserWarning")


def engine(path, **kw) -> Upscaler:
    kw = {"device": "cpu", "threads": 1, "tile": None, "precision": "fp32", **kw}
    return Upscaler(path, **kw)


def model_input(x: np.ndarray, channels: int) -> np.ndarray:
    """What a model of ``channels`` inputs gets from sr for the RGB image ``x``: gray models see
    each channel, RGBA models an opaque alpha."""
    if channels == 4:
        return np.concatenate([x, np.ones_like(x[:, :, :1])], axis=2)
    return x


def spandrel_rgb(path, x: np.ndarray, channels: int) -> np.ndarray:
    """spandrel's own call on the RGB image ``x`` as sr feeds the model (gray: channel by channel)."""
    if channels == 1:
        return np.concatenate([spandrel_call(path, x[:, :, c:c + 1]) for c in range(3)], axis=2)
    return spandrel_call(path, model_input(x, channels))[:, :, :3]


# -- recognition -------------------------------------------------------------------------------
@pytest.mark.parametrize("key", UPSCALERS + RESTORERS)
def test_spandrel_recognises_each_file_as_built(key, model_files):
    files = model_files[key]
    t = files.tiny
    for path in (files.pth, files.wrapped, files.safetensors):
        found = spandrel.ModelLoader().load_from_file(str(path))
        assert (found.architecture.id, found.scale, found.input_channels) == (t.architecture, t.scale,
                                                                              t.channels), path
        desc = sr_weights.describe(path)
        assert desc.arch is not None and not desc.own
        assert desc.architecture == found.architecture.name
        assert (desc.scale, desc.input_channels) == (t.scale, t.channels)
        assert desc.purpose == ("restore" if t.scale == 1 else "upscale")
        assert desc.arch.params == sum(p.numel() for p in found.model.parameters())
        assert desc.supports_bf16 == found.supports_bfloat16
        assert desc.has_budget is False and desc.k_max is None


def test_size_requirements_and_tiling_advice_are_spandrels(model_files):
    safmn = sr_weights.describe(model_files["safmn-x2"].pth)
    assert (safmn.arch.multiple_of, safmn.size_requirements) == (8, "multiple of 8 (padded by the network)")
    swinir = sr_weights.describe(model_files["swinir-x2"].pth)
    assert swinir.arch.minimum == 16 and swinir.tiling == "discouraged"
    assert sr_weights.describe(model_files["compact-x2"].pth).size_requirements == "any size"


# -- untiled and tiled output against spandrel's own call --------------------------------------
@pytest.mark.parametrize("key", UPSCALERS)
@pytest.mark.parametrize("kind", ["pth", "wrapped", "safetensors"])
def test_untiled_output_is_spandrels_call(key, kind, model_files):
    files = model_files[key]
    x = photo(21, 27, seed=3)  # odd sides: SAFMN pads to 8s, SwinIR/HAT/OmniSR to their minimum
    path = getattr(files, kind)
    res = engine(path).upscale(DecodedImage(x))
    want = spandrel_rgb(files.pth, x, files.tiny.channels)
    s = files.scale
    assert res.image.pixels.shape == (21 * s, 27 * s, 3) and res.image.pixels.dtype == np.float32
    assert (res.scale, res.model) == (s, path.stem)
    assert 0.02 < want.std() and 0.5 < ((want > 0) & (want < 1)).mean()  # not a saturated model
    np.testing.assert_allclose(res.image.pixels, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("key", RESTORERS)
def test_a_1x_model_alone_is_refused(key, model_files):
    with pytest.raises(UpscaleError, match="1x restoration model .*--pre"):
        engine(model_files[key].pth)


# The tile overlap each architecture needs for tiles to give the untiled answer within 1e-3: 16 px
# (the default) where the receptive field reaches less far; HAT's overlapping cross-attention reaches
# further. Left out: OmniSR, whose grid attention spans the whole image, and SAFMN, whose multi-scale
# pooling still differs by 4e-4 to 9e-4 at a 48 px overlap (both tiled by sr as spandrel allows;
# their tiles start on the model's grid: test_tiles_start_on_the_models_window_and_block_grid).
TILE_OVERLAP = {"esrgan-x2": 16, "esrgan-x4": 16, "compact-x2": 16, "compact-x3": 16, "swinir-x2": 16,
                "hat-x2": 32, "span-x2": 16, "plksr-x2": 16, "esrgan-gray-x2": 16, "esrgan-rgba-x2": 16}


@pytest.mark.parametrize("key", sorted(TILE_OVERLAP))
def test_tiled_output_is_within_1e_3_of_spandrels_untiled_call(key, model_files):
    files = model_files[key]
    overlap = TILE_OVERLAP[key]
    tile = 3 * overlap + 24  # the smallest the engine takes is 3 x overlap + 1
    h, w = tile + 40, tile + 60
    x = photo(h, w, seed=4)
    up = engine(files.safetensors, tile=tile, tile_overlap=overlap)
    assert up.plan(h, w, _request(files.scale)).tiles >= 4
    res = up.upscale(DecodedImage(x))
    want = spandrel_rgb(files.pth, x, files.tiny.channels)
    assert res.image.pixels.shape == want.shape
    assert np.abs(res.image.pixels - want).max() <= 1e-3


@pytest.mark.parametrize("key", ["swinir-x2", "hat-x2", "safmn-x2"])
def test_tiles_start_on_the_models_window_and_block_grid(key, model_files):
    """A window-attention model's windows, and SAFMN's pooling blocks, are laid from the input's
    origin: a tile starting off that grid cuts other windows than the whole image does, and its
    whole interior differs (by 0.27 for the tiny SwinIR with 1 px aligned tiles)."""
    found = spandrel.ModelLoader().load_from_file(str(model_files[key].pth))
    grid = found.size_requirements.multiple_of if key == "safmn-x2" else found.model.window_size
    desc = sr_weights.describe(model_files[key].pth)
    assert desc.align == grid and grid in (4, 8)
    from sr.inference.tiling import plan_axis

    assert all(start % grid == 0 for start, _ in plan_axis(110, 72, 16, desc.align))


def _request(scale):
    from sr.request import UpscaleRequest

    return UpscaleRequest(scale=scale)


def test_tiling_discouraged_runs_whole_under_auto(model_files):
    """SwinIR's global context: tile="auto" runs it whole (one tile) even where a fixed tile cuts."""
    path = model_files["swinir-x2"].pth
    req = _request(2)
    assert engine(path, tile="auto").plan(300, 300, req).tiles == 1
    assert engine(path, tile=64).plan(300, 300, req).tiles > 1


# -- channels: gray and RGBA inputs and models ---------------------------------------------------
@pytest.mark.parametrize("key", ["compact-x2", "esrgan-gray-x2", "esrgan-rgba-x2"])
def test_gray_input_stays_gray_and_is_the_models_gray_answer(key, model_files):
    files = model_files[key]
    g = photo(19, 23, seed=5)[:, :, :1]
    res = engine(files.pth).upscale(DecodedImage(g))
    out = res.image.pixels
    assert out.shape == (38, 46, 1)
    if files.tiny.channels == 1:  # a gray model: its own answer on the gray image
        want = spandrel_call(files.pth, g)
    else:  # an RGB(A) model: three equal channels in, their mean out
        want = spandrel_rgb(files.pth, np.repeat(g, 3, axis=2), files.tiny.channels).mean(axis=2,
                                                                                            keepdims=True)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-5)


def test_a_gray_model_colours_each_channel(model_files):
    files = model_files["esrgan-gray-x2"]
    x = photo(17, 15, seed=6)
    out = engine(files.pth).upscale(DecodedImage(x)).image.pixels
    for c in range(3):
        np.testing.assert_allclose(out[:, :, c:c + 1], spandrel_call(files.pth, x[:, :, c:c + 1]),
                                   rtol=0, atol=1e-5)
    assert np.abs(out[:, :, 0] - out[:, :, 2]).mean() > 0.01  # colour kept, not turned gray


@pytest.mark.parametrize("key", ["compact-x2", "esrgan-rgba-x2"])
def test_rgba_input_keeps_its_alpha(key, model_files):
    files = model_files[key]
    x = photo(16, 20, seed=7)
    alpha = np.linspace(0, 1, 16 * 20, dtype=np.float32).reshape(16, 20)
    res = engine(files.pth).upscale(DecodedImage(x, alpha=alpha))
    assert res.image.alpha is not None and res.image.alpha.shape == (32, 40)
    np.testing.assert_allclose(res.image.alpha, np.clip(resize_to(alpha, 32, 40), 0, 1), atol=1e-6)
    # the colour is the model's answer on the colour alone (an RGBA model gets an opaque alpha)
    np.testing.assert_allclose(res.image.pixels, spandrel_rgb(files.pth, x, files.tiny.channels),
                               rtol=0, atol=1e-5)


def test_alpha_through_the_model(model_files):
    files = model_files["compact-x2"]
    x = photo(12, 14, seed=8)
    alpha = photo(12, 14, seed=9)[:, :, 0]
    res = engine(files.pth).upscale(DecodedImage(x, alpha=alpha), alpha_mode="model")
    want = spandrel_call(files.pth, np.repeat(alpha[:, :, None], 3, axis=2)).mean(axis=2)
    np.testing.assert_allclose(res.image.alpha, want, rtol=0, atol=1e-5)


def test_16_bit_input_gives_16_bit_samples(model_files):
    files = model_files["span-x2"]
    x = photo(14, 18, seed=10)
    samples = np.round(x * 65535).astype(np.uint16)
    res = engine(files.pth).upscale(DecodedImage(samples, bit_depth=16), quantize=True)
    assert res.image.bit_depth == 16 and res.image.pixels.dtype == np.uint16
    want = spandrel_call(files.pth, samples.astype(np.float32) / 65535)
    assert np.abs(res.image.pixels.astype(np.float64) / 65535 - want).max() <= 1 / 65535


# -- tta and requests --------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["esrgan-x2", "swinir-x2", "dncnn-gray"])
def test_tta_is_the_mean_of_spandrels_call_over_the_8_views(key, model_files):
    files = model_files[key]
    x = photo(18, 18, seed=16)  # square: every view has the same shape
    if files.scale == 1:  # a 1x model runs with tta as --pre, before a plain upscaler
        up, after = engine(model_files["compact-x2"].pth, pre=files.pth), model_files["compact-x2"].pth
    else:
        up, after = engine(files.pth), None
    res = up.upscale(DecodedImage(x), tta=True)
    views = []
    for turns in range(4):
        for flip in (False, True):
            v = np.rot90(x, turns)
            v = v[:, ::-1] if flip else v
            y = spandrel_rgb(files.pth, np.ascontiguousarray(v), files.tiny.channels)
            y = y[:, ::-1] if flip else y
            views.append(np.rot90(y, -turns))
    want = np.clip(np.mean(views, axis=0), 0, 1)
    if after is not None:  # the pre pass's tta mean, then the upscaler's own tta mean
        views = []
        for turns in range(4):
            for flip in (False, True):
                v = np.rot90(want, turns)
                v = v[:, ::-1] if flip else v
                y = spandrel_call(after, np.ascontiguousarray(v))
                y = y[:, ::-1] if flip else y
                views.append(np.rot90(y, -turns))
        want = np.clip(np.mean(views, axis=0), 0, 1)
    np.testing.assert_allclose(res.image.pixels, want, rtol=0, atol=1e-5)
    plain = up.upscale(DecodedImage(x)).image.pixels
    assert np.abs(plain - want).max() > 1e-3  # the views differ: the mean is not one call


def test_an_engine_for_a_request_runs_its_model_and_pre_model(model_files):
    from sr.request import UpscaleRequest

    m, p = model_files["span-x2"], model_files["nafnet"]
    request = UpscaleRequest(model=str(m.pth), pre=str(p.safetensors), precision="fp32")
    up = Upscaler.for_request(request, device="cpu", threads=1, tile=None)
    x = photo(16, 20, seed=17)
    res = up.run(DecodedImage(x), request)
    want = spandrel_call(m.pth, np.clip(spandrel_call(p.pth, x), 0, 1))
    np.testing.assert_allclose(res.image.pixels, want, rtol=0, atol=1e-5)
    assert res.model == "nafnet+span-x2" and up.precision_for(2)[0] == torch.float32


# -- sizes -------------------------------------------------------------------------------------
def test_outscale_and_width_resize_the_models_output(model_files):
    up = engine(model_files["compact-x2"].pth)
    x = photo(10, 12, seed=11)
    assert up.upscale(DecodedImage(x), outscale=3).image.pixels.shape == (30, 36, 3)  # x2 twice, then down
    assert up.upscale(DecodedImage(x), width=18).image.pixels.shape == (15, 18, 3)
    with pytest.raises(UpscaleError, match="scale 4 is not available for model 'compact-x2'"):
        up.upscale(DecodedImage(x), scale=4)


# -- pre: a 1x model before the upscaler -------------------------------------------------------
@pytest.mark.parametrize("pre", RESTORERS)
@pytest.mark.parametrize("main", ["compact-x2", "esrgan-x4"])
def test_pre_then_upscale_is_the_two_calls_in_a_row(pre, main, model_files):
    p, m = model_files[pre], model_files[main]
    x = photo(20, 22, seed=12)
    res = engine(m.safetensors, pre=p.pth).upscale(DecodedImage(x))
    restored = np.clip(spandrel_rgb(p.pth, x, p.tiny.channels), 0, 1)
    want = spandrel_rgb(m.pth, restored, m.tiny.channels)
    np.testing.assert_allclose(res.image.pixels, want, rtol=0, atol=1e-5)
    assert res.model == f"{p.pth.stem}+{m.safetensors.stem}"
    plain = engine(m.safetensors).upscale(DecodedImage(x)).image.pixels
    assert np.abs(plain - want).max() > 1e-3  # the pre model changed the result


def test_pre_is_tiled_like_the_upscaler(model_files):
    p, m = model_files["compact-1x"], model_files["esrgan-x2"]
    x = photo(70, 90, seed=13)
    up = engine(m.pth, pre=p.pth, tile=56)
    assert up.plan(70, 90, _request(2)).tiles == 8  # 2 x 2 tiles for each pass
    res = up.upscale(DecodedImage(x))
    want = spandrel_rgb(m.pth, np.clip(spandrel_call(p.pth, x), 0, 1), 3)
    assert np.abs(res.image.pixels - want).max() <= 1e-3


def test_pre_with_sr_own_model(model_files, tiny_x2):
    p = model_files["compact-1x"]
    x = photo(12, 16, seed=14)
    res = engine(tiny_x2, pre=p.pth).upscale(DecodedImage(x))
    restored = spandrel_call(p.pth, x)
    want = engine(tiny_x2).upscale(DecodedImage(restored)).image.pixels
    np.testing.assert_allclose(res.image.pixels, want, rtol=0, atol=1e-5)


def test_an_upscaler_as_pre_is_refused(model_files, tiny_x2):
    with pytest.raises(UpscaleError, match="pre: .* x2 upscaling model; pre takes a 1x"):
        engine(model_files["compact-x2"].pth, pre=model_files["esrgan-x2"].pth)
    with pytest.raises(UpscaleError, match="pre: .*x2 upscaling model"):
        engine(model_files["compact-x2"].pth, pre=tiny_x2)


# -- precision ---------------------------------------------------------------------------------
def _cpu_kind(monkeypatch, start):
    """Simulate a CPU where auto runs bf16 from ``start`` pixels (None: never)."""
    monkeypatch.setattr(sr_precision, "bf16_speed", lambda: (start, "simulated CPU"))


def _count_checks(monkeypatch) -> list:
    from sr.external import bf16_check

    calls = []
    real = bf16_check.measure_agreement

    def counted(desc):
        calls.append(desc.name)
        return real(desc)

    monkeypatch.setattr(bf16_check, "measure_agreement", counted)
    return calls


def test_auto_is_fp32_where_the_cpu_has_no_fast_bf16_and_nothing_is_measured(model_files, monkeypatch,
                                                                           _private_cache):
    _cpu_kind(monkeypatch, None)
    calls = _count_checks(monkeypatch)
    up = engine(model_files["compact-x2"].pth, precision="auto")
    dtype, why = up.precision_for(2)
    assert dtype == torch.float32 and why == "fp32: simulated CPU"
    assert calls == [] and not (_private_cache / "bf16-checks.json").exists()


@pytest.mark.cpu_bf16
def test_auto_checks_bf16_once_per_file_and_caches_the_answer(model_files, monkeypatch, _private_cache):
    _cpu_kind(monkeypatch, 0)
    calls = _count_checks(monkeypatch)
    path = model_files["compact-x2"].pth
    dtype, why = engine(path, precision="auto").precision_for(2)
    assert calls == ["compact-x2"]
    cache = _private_cache / "bf16-checks.json"
    entries = json.loads(cache.read_text())
    assert len(entries) == 1
    db = next(iter(entries.values()))
    assert db >= 50 and dtype == torch.bfloat16
    assert why.startswith("bf16: simulated CPU; output") and f"{db:.1f} dB" in why
    # a second engine, a second process's worth of state: the file's answer is read, not measured
    again = engine(path, precision="auto").precision_for(2)
    assert again == (dtype, why) and calls == ["compact-x2"]
    # a copy of the file is the same content: the same answer, still not measured again
    copy = _private_cache.parent / "copy.pth"
    copy.write_bytes(path.read_bytes())
    assert engine(copy, precision="auto").precision_for(2)[0] == torch.bfloat16
    assert calls == ["compact-x2"]


def test_auto_keeps_fp32_when_the_check_fails(model_files, monkeypatch, _private_cache):
    from sr.external import bf16_check

    _cpu_kind(monkeypatch, 0)
    calls = []
    monkeypatch.setattr(bf16_check, "measure_agreement", lambda desc: calls.append(1) or 31.5)
    path = model_files["esrgan-x2"].pth
    dtype, why = engine(path, precision="auto").precision_for(2)
    assert dtype == torch.float32
    assert why == "fp32: bf16 output 31.5 dB from fp32 on the check image (bf16 needs >= 50 dB)"
    assert engine(path, precision="auto").precision_for(2)[0] == torch.float32 and calls == [1]
    assert list(json.loads((_private_cache / "bf16-checks.json").read_text()).values()) == [31.5]


def test_auto_is_fp32_for_an_architecture_spandrel_says_has_no_bf16(model_files, monkeypatch):
    import dataclasses

    _cpu_kind(monkeypatch, 0)
    calls = _count_checks(monkeypatch)
    desc = sr_weights.describe(model_files["compact-x2"].pth)
    no_bf16 = dataclasses.replace(desc, arch=dataclasses.replace(desc.arch, bf16=False))
    dtype, why = sr_precision.choose_external_dtype(no_bf16, "auto", torch.device("cpu"))
    assert (dtype, why) == (torch.float32, "fp32: spandrel says RealESRGAN Compact does not support bf16")
    assert calls == []
    with pytest.raises(sr_precision.PrecisionError, match="does not run in bf16"):
        sr_precision.choose_external_dtype(no_bf16, "bf16", torch.device("cpu"))


def test_auto_is_fp32_under_the_cpus_bf16_start_size(model_files, monkeypatch):
    _cpu_kind(monkeypatch, 512 * 512)
    calls = _count_checks(monkeypatch)
    up = engine(model_files["compact-x2"].pth, precision="auto")
    dtype, why = up.precision_for(2, pixels=100 * 100)
    assert dtype == torch.float32 and why.startswith("fp32: input under 0.26 MP") and calls == []


@pytest.mark.cpu_bf16
def test_bf16_output_is_close_to_fp32(model_files):
    path = model_files["compact-x2"].pth
    x = photo(24, 24, seed=15)
    fp32 = engine(path).upscale(DecodedImage(x)).image.pixels
    bf16 = engine(path, precision="bf16").upscale(DecodedImage(x)).image.pixels
    assert 0 < np.abs(bf16 - fp32).max() < 0.05
