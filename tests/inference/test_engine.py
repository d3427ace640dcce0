"""Upscaler: weights resolution, devices, shapes and modes, outscale planning, thread safety."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from sr.inference import UpscaleError, Upscaler, choose_passes, list_models
from sr.inference.resample import resize_to
from sr.io import DecodedImage


def texture(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    """Smooth colour gradients plus fine noise: detail at every scale, values in [0, 1]."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    base = np.stack([np.sin(7 * xx + 3 * k) * np.cos(5 * yy - k) for k in range(c)], axis=2)
    return np.clip(0.5 + 0.35 * base + 0.1 * rng.standard_normal((h, w, c)), 0, 1).astype(np.float32)


@pytest.fixture(scope="module")
def up(tiny_x2) -> Upscaler:
    return Upscaler(str(tiny_x2), device="cpu", tile=None, threads=1)


# -- construction ------------------------------------------------------------------------------
def test_family_from_weights_dir_has_all_scales(weights_dir):
    up = Upscaler("tiny", device="cpu", weights_dir=weights_dir, threads=1)
    assert up.scales == [2, 3, 4]
    assert up.k_max == 8  # from the metadata, before any weights are loaded
    assert up.device == torch.device("cpu")
    res = up.upscale(DecodedImage(texture(9, 7)), scale=3)
    assert res.image.pixels.shape == (27, 21, 3)
    assert (res.model, res.scale) == ("tiny-x3", 3)


def test_single_file_and_full_name(weights_dir, tiny_x2):
    assert Upscaler(tiny_x2, device="cpu", threads=1).scales == [2]
    named = Upscaler("tiny-x4", device="cpu", weights_dir=weights_dir, threads=1)
    assert named.scales == [4]


def test_unknown_model_lists_what_exists(weights_dir):
    with pytest.raises(UpscaleError, match="tiny-x2"):
        Upscaler("nope", device="cpu", weights_dir=weights_dir)
    with pytest.raises(UpscaleError, match="not found"):
        Upscaler("/no/such/file.safetensors", device="cpu")


def test_corrupt_weights_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(UpscaleError, match="bad.safetensors"):
        Upscaler(bad, device="cpu")


def test_devices_and_dtype(tiny_x2):
    with pytest.raises(UpscaleError, match="unknown device"):
        Upscaler(tiny_x2, device="tpu9")
    if not torch.cuda.is_available():
        with pytest.raises(UpscaleError, match="not available"):
            Upscaler(tiny_x2, device="cuda")
    if not torch.backends.mps.is_available():
        with pytest.raises(UpscaleError, match="not available"):
            Upscaler(tiny_x2, device="mps")
    up = Upscaler(tiny_x2, device="cpu", threads=1)
    assert up.dtype == torch.float32  # never half precision on CPU


def test_out_of_memory_retries_with_half_the_tile():
    """A GPU that cannot hold tiles over 50 px: the pass runs again with half the tile until it fits."""
    from sr.inference.tiling import halving_tile_on_oom

    cuda = torch.device("cuda")  # only the policy looks at the device: nothing runs on it
    tried = []

    def attempt(tile):
        tried.append(tile)
        if (tile or 100) > 50:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return f"ran with tile {tile}"

    assert halving_tile_on_oom(attempt, None, 100, overlap=4, align=8, device=cuda) == "ran with tile 48"
    assert tried == [None, 48]  # the whole input first, then half of its side, aligned down
    tried.clear()
    assert halving_tile_on_oom(attempt, 256, 1000, overlap=4, align=8, device=cuda) == "ran with tile 32"
    assert tried == [256, 128, 64, 32]

    def never_fits(tile):
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(UpscaleError, match="out of cuda memory even with tile"):
        halving_tile_on_oom(never_fits, None, 100, overlap=4, align=8, device=cuda)
    with pytest.raises(torch.OutOfMemoryError):  # a CPU's memory does not grow with smaller tiles
        halving_tile_on_oom(never_fits, None, 100, overlap=4, align=8, device=torch.device("cpu"))

    def broken(tile):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):  # only running out of memory is retried
        halving_tile_on_oom(broken, None, 100, overlap=4, align=8, device=cuda)


def test_an_out_of_memory_error_on_the_cpu_reaches_the_caller(tiny_x2):
    up = Upscaler(tiny_x2, device="cpu", tile=None, threads=1)
    calls = []

    def out_of_memory(module, args):
        calls.append(args[0].shape)
        raise torch.OutOfMemoryError("out of memory")

    handle = up.network(2).register_forward_pre_hook(out_of_memory)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            up.upscale(DecodedImage(texture(40, 30)))
    finally:
        handle.remove()
    assert len(calls) == 1  # no retry with smaller tiles


def test_bad_tile_arguments(tiny_x2):
    with pytest.raises(UpscaleError, match="tile"):
        Upscaler(tiny_x2, device="cpu", tile="big")
    with pytest.raises(UpscaleError, match="too small"):
        Upscaler(tiny_x2, device="cpu", tile=20, tile_overlap=16)
    with pytest.raises(UpscaleError, match="tile_overlap"):
        Upscaler(tiny_x2, device="cpu", tile_overlap=-1)


def test_list_models_reads_metadata(weights_dir):
    models = {m["name"]: m for m in list_models(weights_dir)}
    assert set(models) == {"tiny-x2", "tiny-x3", "tiny-x4"}
    m = models["tiny-x3"]
    assert (m["preset"], m["scale"], m["set5_psnr"], m["set14_psnr"]) == ("tiny", 3, 30.5, 28.25)
    assert m["k_max"] == 8 and m["attention"] == "adaptive"
    assert m["params"] == sum(p.numel() for p in Upscaler(m["path"], device="cpu").network(3).parameters())
    assert list_models(weights_dir / "missing") == []


# -- images ------------------------------------------------------------------------------------
@pytest.mark.parametrize("h,w", [(1, 1), (1, 5), (7, 3), (37, 23)])
def test_any_size_including_1x1_and_odd(up, h, w):
    res = up.upscale(DecodedImage(texture(h, w)))
    px = res.image.pixels
    assert px.shape == (2 * h, 2 * w, 3) and px.dtype == np.float32
    assert np.isfinite(px).all() and px.min() >= 0 and px.max() <= 1
    assert res.seconds > 0


def test_gray_stays_gray_and_is_the_rgb_mean(up):
    gray = texture(21, 17, c=1)
    res = up.upscale(DecodedImage(gray))
    assert res.image.pixels.shape == (42, 34, 1) and res.image.is_gray
    rgb = up.upscale(DecodedImage(np.repeat(gray, 3, axis=2))).image.pixels
    np.testing.assert_allclose(res.image.pixels[:, :, 0], rgb.mean(axis=2), atol=1e-5)


def test_alpha_bicubic_and_through_the_model(up):
    px, alpha = texture(20, 30), texture(20, 30, c=1, seed=3)[:, :, 0]
    img = DecodedImage(px, alpha=alpha)
    bic = up.upscale(img, alpha_mode="bicubic").image
    np.testing.assert_allclose(bic.alpha, np.clip(resize_to(alpha, 40, 60), 0, 1), atol=1e-6)
    mod = up.upscale(img, alpha_mode="model").image
    expected = up.upscale(DecodedImage(alpha[:, :, None])).image.pixels[:, :, 0]
    np.testing.assert_allclose(mod.alpha, expected, atol=1e-6)
    assert np.abs(mod.alpha - bic.alpha).max() > 1e-3  # the two modes really differ
    np.testing.assert_array_equal(bic.pixels, mod.pixels)  # colour untouched by the alpha mode
    with pytest.raises(UpscaleError, match="alpha_mode"):
        up.upscale(img, alpha_mode="nearest")


def test_bit_depth_icc_and_format_are_kept(up):
    icc = b"fake-profile" * 20
    img = DecodedImage(texture(8, 8), bit_depth=16, icc_profile=icc, format="PNG", mode="RGB;16")
    out = up.upscale(img).image
    assert (out.bit_depth, out.icc_profile, out.format, out.mode) == (16, icc, "PNG", "RGB;16")
    # 16-bit precision survives: values are not quantised to 8-bit steps
    steps = np.unique(np.round(out.pixels * 65535) % 257)
    assert len(steps) > 2


# -- sizes -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "factor,scales,expected",
    [(1.5, [2, 3, 4], [2]), (0.5, [2, 3, 4], [2]), (3, [2, 3, 4], [3]), (3.7, [2, 3, 4], [4]),
     (5, [2, 3, 4], [2, 3]), (8, [2, 3, 4], [2, 4]), (16, [2, 3, 4], [4, 4]), (8, [2], [2, 2, 2]),
     (3, [4], [4]), (9, [3, 4], [3, 3])],
)
def test_choose_passes(factor, scales, expected):
    assert choose_passes(factor, scales) == expected


def test_outscale_gives_the_exact_size(weights_dir):
    up = Upscaler("tiny", device="cpu", weights_dir=weights_dir, threads=1)
    img = DecodedImage(texture(23, 37))
    for s, size in [(1.5, (35, 56)), (3.7, (85, 137)), (0.5, (12, 19)), (8, (184, 296))]:
        res = up.upscale(img, outscale=s)
        assert res.image.pixels.shape[:2] == size, s
        assert res.image.pixels.min() >= 0 and res.image.pixels.max() <= 1
    assert up.upscale(img, outscale=8).model == "tiny-x2+tiny-x4"
    assert up.upscale(img, outscale=8).scale == 8
    assert up.upscale(img, width=74).image.pixels.shape[:2] == (46, 74)  # aspect kept
    assert up.upscale(img, height=30).image.pixels.shape[:2] == (30, 48)
    assert up.upscale(img, width=50, height=20).image.pixels.shape[:2] == (20, 50)
    assert up.upscale(img, scale=2, outscale=3).model == "tiny-x2+tiny-x2"  # scale pins the model


@pytest.mark.parametrize(
    "kwargs,match",
    [({"outscale": 0}, "outscale"), ({"outscale": float("nan")}, "outscale"), ({"outscale": -2}, "outscale"),
     ({"width": 0}, "width"), ({"height": 2.5}, "height"), ({"outscale": 2, "width": 10}, "either"),
     ({"scale": 3}, "not available"), ({"outscale": 1e6}, "at most")],
)
def test_bad_size_arguments(up, kwargs, match):
    with pytest.raises(UpscaleError, match=match):
        up.upscale(DecodedImage(texture(4, 4)), **kwargs)


# -- budget maps, threads ----------------------------------------------------------------------
def test_tta_averages_the_eight_views_of_each_tile(tiny_x2):
    from sr.inference.ensemble import self_ensemble

    img = DecodedImage(texture(13, 10))
    whole = Upscaler(tiny_x2, device="cpu", tile=None, threads=1)
    plain, tta = whole.upscale(img), whole.upscale(img, tta=True, with_budget_map=True)
    assert tta.image.pixels.shape == plain.image.pixels.shape == (26, 20, 3)
    assert tta.budget_map.shape == (26, 20)
    net = whole.network(2)
    x = torch.from_numpy(img.pixels.transpose(2, 0, 1).copy())[None]
    with torch.inference_mode():
        expected = self_ensemble(lambda t: (net(t), None), x)[0].clamp(0, 1)[0].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(tta.image.pixels, expected, atol=1e-5)
    assert np.abs(tta.image.pixels - plain.image.pixels).max() > 1e-4  # the views do differ
    # Tiled: every tile is ensembled on its own, and the seams stay as invisible as without it.
    big = DecodedImage(texture(70, 52, seed=1))
    tiled = Upscaler(tiny_x2, device="cpu", tile=32, tile_overlap=6, threads=1).upscale(big, tta=True)
    np.testing.assert_allclose(tiled.image.pixels, whole.upscale(big, tta=True).image.pixels, atol=0.02)
    with pytest.raises(UpscaleError, match="tta must be true or false"):
        whole.upscale(img, tta="yes")


def test_budget_map_at_output_size_and_stitched_across_tiles(tiny_x2):
    img = DecodedImage(texture(70, 90))
    whole = Upscaler(tiny_x2, device="cpu", tile=None, threads=1).upscale(img, with_budget_map=True)
    tiler = Upscaler(tiny_x2, device="cpu", tile=48, tile_overlap=8, threads=1)
    tiled = tiler.upscale(img, with_budget_map=True)
    for res in (whole, tiled):
        b = res.budget_map
        assert b.shape == (140, 180) and b.dtype == np.float32
        assert b.min() >= 0 and b.max() <= 8  # k_max of the ASA blocks
        assert 1.0 < b.mean() < 7.0  # normalised around the target budget of 4
    odd = Upscaler(tiny_x2, device="cpu", threads=1).upscale(img, outscale=1.3, with_budget_map=True)
    assert odd.budget_map.shape == odd.image.pixels.shape[:2]
    assert Upscaler(tiny_x2, device="cpu", threads=1).upscale(img).budget_map is None


def test_concurrent_calls_equal_sequential_ones(tiny_x2):
    up = Upscaler(tiny_x2, device="cpu", tile=40, tile_overlap=8, threads=1)
    images = [DecodedImage(texture(30 + 7 * i, 50 - 3 * i, seed=i)) for i in range(6)]
    sequential = [up.upscale(im, with_budget_map=True) for im in images]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(lambda im: up.upscale(im, with_budget_map=True), images))
    for a, b in zip(sequential, concurrent, strict=True):
        np.testing.assert_array_equal(a.image.pixels, b.image.pixels)
        np.testing.assert_array_equal(a.budget_map, b.budget_map)


def test_lazy_loading_is_shared_across_threads(weights_dir, weight_reads):
    reads = weight_reads
    up = Upscaler("tiny", device="cpu", weights_dir=weights_dir, threads=1)
    assert reads == []  # no tensors read until used
    img = DecodedImage(texture(6, 6))
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: up.upscale(img, scale=4), range(8)))
    assert reads == ["tiny-x4"]  # one load, whatever the threads
    assert {(r.model, r.precisions) for r in results} == {("tiny-x4", ("fp32",))}


# -- cancellation ------------------------------------------------------------------------------
def test_should_stop_cancels_between_tiles(tiny_x2):
    from sr.inference import UpscaleCancelled

    up = Upscaler(tiny_x2, device="cpu", tile=64, tile_overlap=8, threads=1)
    polls = []

    def stop_after_three() -> bool:
        polls.append(1)
        return len(polls) > 3

    with pytest.raises(UpscaleCancelled):
        up.upscale(DecodedImage(texture(200, 200)), should_stop=stop_after_three)
    assert len(polls) == 4  # three tiles ran, the fourth was refused before its forward
    # the same Upscaler serves the next call normally
    res = up.upscale(DecodedImage(texture(20, 20)), should_stop=lambda: False)
    assert res.image.pixels.shape == (40, 40, 3)


def test_should_stop_is_polled_per_ensemble_view(up):
    from sr.inference import UpscaleCancelled

    polls = []
    with pytest.raises(UpscaleCancelled):
        up.upscale(DecodedImage(texture(16, 16)), tta=True,
                   should_stop=lambda: polls.append(1) or len(polls) > 2)
    assert len(polls) == 3


# -- attention paths and GPU hygiene (exercised on CPU) ----------------------------------------
def test_attention_path_choice_and_errors(tiny_x2):
    assert Upscaler(tiny_x2, device="cpu").attention_path == "tiered"  # measured fastest on CPU
    up = Upscaler(tiny_x2, device="cpu", attention_path="static")
    up.load()
    assert all(m.static for m in up.network(2).modules() if hasattr(m, "static"))
    assert Upscaler(tiny_x2, device="cpu", compile=True).attention_path == "static"
    with pytest.raises(UpscaleError, match="attention path"):
        Upscaler(tiny_x2, device="cpu", attention_path="fast")
    with pytest.raises(UpscaleError, match="tile_batch"):
        Upscaler(tiny_x2, device="cpu", tile_batch=0)


def test_static_path_gives_the_tiered_output(tiny_x2):
    img = DecodedImage(texture(45, 61))
    tiered = Upscaler(tiny_x2, device="cpu", tile=None, threads=1).upscale(img).image.pixels
    static = Upscaler(tiny_x2, device="cpu", tile=None, threads=1, attention_path="static")
    np.testing.assert_allclose(static.upscale(img).image.pixels, tiered, atol=1e-5)


def test_batched_bucketed_tiles_match_one_tile_at_a_time(tiny_x2):
    """The CUDA recipe on CPU: tiles padded to one bucketed shape and run 4 per forward."""
    img = DecodedImage(texture(150, 130))
    kw = dict(device="cpu", tile=64, tile_overlap=8, threads=1, attention_path="static", shape_bucket=32)
    one_by_one = Upscaler(tiny_x2, tile_batch=1, **kw)
    gpu_like = Upscaler(tiny_x2, tile_batch=4, **kw)
    shapes = []
    gpu_like.network(2).register_forward_pre_hook(lambda net, args: shapes.append(tuple(args[0].shape)))
    a = one_by_one.upscale(img, with_budget_map=True)
    b = gpu_like.upscale(img, with_budget_map=True)
    assert b.image.pixels.shape == a.image.pixels.shape == (300, 260, 3)
    np.testing.assert_allclose(b.image.pixels, a.image.pixels, atol=1e-5)  # a batch changes nothing
    np.testing.assert_allclose(b.budget_map, a.budget_map, atol=1e-5)
    assert {s[2:] for s in shapes} == {(64, 64)}  # every forward has the one bucketed shape
    assert [s[0] for s in shapes] == [4, 4, 1]  # 9 tiles, 4 per forward
    # Padding a short edge tile to the bucket changes what its gate and routing see: small on a trained
    # model (49.9 dB on data/coffee.png, asa-base-x2, 96 px tiles), larger on this random tiny one.
    exact = Upscaler(tiny_x2, device="cpu", tile=64, tile_overlap=8, threads=1).upscale(img).image.pixels
    assert 10 * np.log10(1 / float(np.mean((b.image.pixels - exact) ** 2))) > 30


# -- integer output (quantize=True) ------------------------------------------------------------
# case -> upscale() arguments; "two passes" runs an x2-only model twice for x4
QUANTIZE_CASES = {"tiled": {}, "gray": {}, "16-bit": {}, "alpha": {}, "outscale": {"outscale": 2.5},
                  "two passes": {"outscale": 4}, "whole": {}}


@pytest.mark.parametrize("case", QUANTIZE_CASES)
def test_quantized_output_equals_quantizing_the_float_output(case, tiny_x2):
    from sr.io import encode_image, quantize

    tile = None if case == "whole" else 48
    up = Upscaler(str(tiny_x2), device="cpu", tile=tile, tile_overlap=8, threads=1)
    c = 1 if case == "gray" else 3
    alpha = texture(70, 90, c=1, seed=5)[:, :, 0] if case == "alpha" else None
    img = DecodedImage(texture(70, 90, c=c), alpha=alpha, bit_depth=16 if case == "16-bit" else 8)
    kwargs = QUANTIZE_CASES[case]
    floats = up.upscale(img, **kwargs).image
    samples = up.upscale(img, quantize=True, **kwargs).image
    assert encode_image(samples, "png") == encode_image(floats, "png")  # the written file is the same
    if alpha is not None:  # JPEG's composite on white needs the unrounded values: alpha stays float
        np.testing.assert_array_equal(samples.pixels, floats.pixels)
        np.testing.assert_array_equal(samples.alpha, floats.alpha)
        return
    dtype = np.uint16 if img.bit_depth == 16 else np.uint8
    assert samples.pixels.dtype == dtype and samples.pixels.shape == floats.pixels.shape
    np.testing.assert_array_equal(samples.pixels, quantize(floats.pixels, dtype))


def test_quantize_must_be_a_bool(up):
    with pytest.raises(UpscaleError, match="quantize must be true or false"):
        up.upscale(DecodedImage(texture(8, 8)), quantize=1)


def test_a_quantized_result_upscales_again_like_its_float_values(up):
    img = DecodedImage(texture(12, 10))
    samples = up.upscale(img, quantize=True).image
    again = up.upscale(samples).image.pixels
    expected = up.upscale(DecodedImage(samples.pixels.astype(np.float32) / 255)).image.pixels
    np.testing.assert_array_equal(again, expected)


def test_check_scale_refuses_what_plan_size_refuses(weights_dir):
    engine = Upscaler("tiny", device="cpu", weights_dir=weights_dir, threads=1)
    for ok in (None, 2, 3, 4):
        engine.check_scale(ok)
    for bad in (5, 2.5, True):
        with pytest.raises(UpscaleError) as checked:
            engine.check_scale(bad)
        with pytest.raises(UpscaleError) as planned:
            engine.plan_size(1, 1, scale=bad)
        assert str(checked.value) == str(planned.value)
    with pytest.raises(UpscaleError, match=r"scale 5 is not available for model 'tiny' \(available: 2, 3, 4"):
        engine.check_scale(5)


@pytest.mark.parametrize("tile", ["AUTO", "off", "none", -1, "x", 12.5])
def test_engine_reads_tile_by_the_one_policy(tiny_x2, tile):
    from sr.request import parse_tile

    try:
        expected = parse_tile(tile)
    except ValueError as e:
        with pytest.raises(UpscaleError, match="tile must be 'auto', 0 \\(off\\) or a size in pixels"):
            Upscaler(str(tiny_x2), device="cpu", tile=tile, threads=1)
        assert "got" in str(e)
        return
    engine = Upscaler(str(tiny_x2), device="cpu", tile=tile, threads=1)
    assert engine.tile == (expected or None)
