"""Tiling: plans cover the image with aligned, pairwise overlaps; blending is seam-free."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import data

from sr.inference import Upscaler, tiling
from sr.inference.engine import DEFAULT_TILE_OVERLAP
from sr.inference.tiling import (
    AUTO_TILE_MAX,
    TILE_MIN_GAIN,
    TileGrid,
    auto_tile_limit,
    axis_weights,
    cpu_tile_cost,
    fastest_tile,
    min_tile,
    plan_axis,
    plan_cost,
    relative_cost,
    run_tiled,
    tile_for,
)
from sr.io import DecodedImage
from sr.models import build_model
from sr.request import parse_tile
from sr.resize import imresize
from sr.weights import save_weights


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b) ** 2))
    return 10 * np.log10(1 / mse) if mse > 0 else float("inf")


@pytest.mark.parametrize("length", [1, 7, 34, 64, 65, 100, 129, 250, 513, 1000])
@pytest.mark.parametrize(
    "tile,overlap,align", [(64, 16, 8), (56, 16, 8), (100, 10, 1), (128, 0, 8), (120, 32, 16), (24, 0, 8)]
)
def test_plan_covers_with_aligned_pairwise_overlaps(length, tile, overlap, align):
    if tile < min_tile(overlap, align):
        pytest.skip("tile too small for this overlap")
    spans = plan_axis(length, tile, overlap, align)
    assert spans[0][0] == 0 and spans[-1][1] == length
    for (a0, a1), (b0, _) in zip(spans, spans[1:], strict=False):
        assert b0 % align == 0 and b0 > a0
        assert a1 - b0 >= overlap  # enough shared context, and no gaps
    for a, c in zip(spans, spans[2:], strict=False):
        assert c[0] >= a[1]  # never three tiles over one pixel
    assert all(e - s <= tile for s, e in spans)


def test_plan_rejects_a_tile_too_small_for_the_overlap():
    with pytest.raises(ValueError, match="too small"):
        plan_axis(500, 40, 16, 8)


@pytest.mark.parametrize("ramp", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("scale", [1, 2, 3])
def test_weights_are_a_partition_of_unity(ramp, scale):
    spans = plan_axis(300, 64, 16, 8)
    total = np.zeros(300 * scale)
    for i, (s, e) in enumerate(spans):
        w = axis_weights(spans, i, scale, ramp)
        assert w.shape == ((e - s) * scale,) and w.min() >= 0 and w.max() <= 1
        total[s * scale : e * scale] += w
    np.testing.assert_allclose(total, 1.0, atol=1e-6)


def test_run_tiled_is_exact_for_a_local_operator():
    """Nearest-neighbour upscaling has no context: tiling must reproduce it exactly."""
    rng = np.random.default_rng(0)
    img = rng.random((150, 97, 3), dtype=np.float32)

    def nearest(a: np.ndarray):
        return np.repeat(np.repeat(a, 2, 0), 2, 1), a[:, :, 0].copy()

    out, budget = run_tiled(img, nearest, 2, 56, 16, 8, want_budget=True)
    np.testing.assert_allclose(out, nearest(img)[0], atol=1e-6)
    np.testing.assert_allclose(budget, img[:, :, 0], atol=1e-6)


@pytest.fixture(scope="module")
def sharp_model(tmp_path_factory) -> Path:
    """asa-small with random weights, rescaled so its output is far from smooth: the residual over
    bicubic is ~22 dB (a random net's raw output is either too smooth to show seams or saturated)."""
    torch.manual_seed(0)
    model = build_model("asa-small-x2")
    with torch.no_grad():
        for block in model.body:
            if hasattr(block, "conv2"):
                block.conv2.weight.mul_(0.5)  # tame the residual stack
            if hasattr(block, "attend"):  # a fresh branch starts near zero; make it matter, as trained
                block.proj.reset_parameters()  # PyTorch's default conv init
        model.upsample.weight.mul_(0.3)
    return save_weights(model, tmp_path_factory.mktemp("sharp") / "sharp-x2.safetensors")


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return np.clip(imresize(data.astronaut().astype(np.float32) / 255, 0.25), 0, 1)  # 128x128 texture


def seam_spike(out: np.ndarray, ref: np.ndarray) -> float:
    """Worst row/column of the derivative error (in 8-bit steps): a seam is a line where it jumps."""
    ex = np.abs(np.diff(out, axis=1) - np.diff(ref, axis=1)).mean(axis=(0, 2))
    ey = np.abs(np.diff(out, axis=0) - np.diff(ref, axis=0)).mean(axis=(1, 2))
    return 255 * float(max(ex.max(), ey.max()))


def test_tiles_are_seam_free_and_blending_matters(sharp_model, photo):
    up = Upscaler(sharp_model, device="cpu", tile=None, threads=1)
    run, align = up.tile_runner(2)
    with torch.inference_mode():
        whole, _ = run(photo)
        assert psnr(whole, np.clip(imresize(photo, 2), 0, 1)) < 30  # far from bicubic: seams would show
        blended = run_tiled(photo, run, 2, 64, DEFAULT_TILE_OVERLAP, align)[0]
        hard_cut = run_tiled(photo, run, 2, 64, DEFAULT_TILE_OVERLAP, align, ramp=0.0)[0]
        abutting = run_tiled(photo, run, 2, 64, 0, align)[0]  # blending off: no overlap, no fade
    assert psnr(blended, whole) >= 45.0
    assert psnr(blended, whole) >= psnr(hard_cut, whole)  # the cross-fade never loses to a cut
    assert psnr(abutting, whole) < min(42.0, psnr(blended, whole) - 5.0)  # plain seams without it
    assert seam_spike(abutting, whole) > 5 * seam_spike(blended, whole)
    assert seam_spike(blended, whole) < 2.0  # under 2 grey levels of gradient error on any line


def test_engine_tiling_matches_whole_image(sharp_model, photo):
    img = DecodedImage(photo)
    whole = Upscaler(sharp_model, device="cpu", tile=0, threads=1).upscale(img).image.pixels
    tiled = Upscaler(sharp_model, device="cpu", tile=64, threads=1).upscale(img).image.pixels
    assert psnr(tiled, whole) >= 45.0


def context_op(a: np.ndarray) -> tuple[np.ndarray, None]:
    """A stand-in network whose output depends on the whole tile (its mean), so overlapping tiles
    disagree and the blend matters: x2 nearest plus a tile-wide term."""
    up = np.repeat(np.repeat(a, 2, axis=0), 2, axis=1)
    return np.clip(0.8 * up + 0.2 * a.mean(axis=(0, 1)), 0, 1).astype(np.float32), None


def blend_everything(pixels: np.ndarray, run, scale: int, tile: int, overlap: int, align: int,
                     ramp: float = tiling.BLEND_RAMP) -> np.ndarray:
    """The blending before tile rows were streamed: one full-size float32 sum, tile by tile, each
    tile times its whole weight map."""
    h, w, c = pixels.shape
    rows, cols = plan_axis(h, tile, overlap, align), plan_axis(w, tile, overlap, align)
    out = np.zeros((h * scale, w * scale, c), np.float32)
    for i, (y0, y1) in enumerate(rows):
        for j, (x0, x1) in enumerate(cols):
            weight = axis_weights(rows, i, scale, ramp)[:, None] * axis_weights(cols, j, scale, ramp)[None, :]
            tile_out = run(pixels[y0:y1, x0:x1])[0]
            out[y0 * scale : y1 * scale, x0 * scale : x1 * scale] += tile_out * weight[:, :, None]
    return out


@pytest.mark.parametrize("shape,tile,overlap,align", [((200, 170, 3), 64, 16, 8), ((131, 97, 1), 48, 8, 1),
                                                      ((90, 300, 3), 90, 16, 8)])
def test_streamed_samples_equal_quantizing_the_float_output(shape, tile, overlap, align):
    from sr.io import quantize

    pixels = np.random.default_rng(1).random(shape, dtype=np.float32)
    reference = blend_everything(pixels, context_op, 2, tile, overlap, align)
    floats, _ = run_tiled(pixels, context_op, 2, tile, overlap, align)
    np.testing.assert_array_equal(floats, reference)  # the float path is the old sum, bit for bit
    for dtype in (np.uint8, np.uint16):
        samples, _ = run_tiled(pixels, context_op, 2, tile, overlap, align, out_dtype=dtype)
        assert samples.dtype == dtype
        np.testing.assert_array_equal(samples, quantize(reference, dtype))


@pytest.mark.parametrize("ramp", [0.0, 0.25, 1.0])
def test_blending_is_the_weighted_sum_bit_for_bit_at_any_ramp(ramp):
    # a hard cut (weights 0 and 1 only), a narrow ramp and one across the whole overlap
    pixels = np.random.default_rng(3).random((160, 130, 3), dtype=np.float32)
    floats, _ = run_tiled(pixels, context_op, 2, 56, 16, 8, ramp=ramp)
    np.testing.assert_array_equal(floats, blend_everything(pixels, context_op, 2, 56, 16, 8, ramp))


def test_batched_tiles_across_rows_stream_the_same_samples():
    pixels = np.random.default_rng(2).random((150, 150, 3), dtype=np.float32)
    one, _ = run_tiled(pixels, context_op, 2, 48, 8, 8, out_dtype=np.uint8)
    # 5 tiles per batch: batches straddle tile rows (a row here is 4 tiles)
    many, _ = run_tiled(pixels, context_op, 2, 48, 8, 8, out_dtype=np.uint8,
                        run_many=lambda arrs: [context_op(a) for a in arrs], batch=5)
    np.testing.assert_array_equal(many, one)


def test_progress_counts_every_tile():
    pixels = np.zeros((100, 100, 3), np.float32)
    calls: list[tuple[int, int]] = []
    run_tiled(pixels, context_op, 2, 48, 8, 8, progress=lambda done, total: calls.append((done, total)))
    n = len(plan_axis(100, 48, 8, 8)) ** 2
    assert calls == [(k, n) for k in range(1, n + 1)]
    calls.clear()
    run_tiled(pixels, context_op, 2, None, 8, 8, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 1)]


def test_relative_cost_interpolates_and_clamps():
    costs = {128: 2.0, 256: 1.0, 512: 3.0}
    assert relative_cost(192, costs) == pytest.approx(1.5)
    assert relative_cost(384, costs) == pytest.approx(2.0)
    assert relative_cost(64, costs) == 2.0 and relative_cost(1000, costs) == 3.0


def test_plan_cost_counts_the_recomputed_overlap():
    flat = {128: 1.0, 512: 1.0}
    assert plan_cost(300, 200, None, 16, 8, flat) == 300 * 200
    tiled = plan_cost(300, 200, 128, 16, 8, flat)
    rows, cols = plan_axis(300, 128, 16, 8), plan_axis(200, 128, 16, 8)
    assert tiled == sum((b - a) * (d - c) for a, b in rows for c, d in cols) > 300 * 200


@pytest.mark.parametrize("limit", [40, 200, 300, 512])
def test_fastest_tile_never_exceeds_the_limit_and_takes_the_cheapest(limit):
    costs = {128: 1.3, 192: 1.1, 256: 1.0, 384: 1.2, 512: 1.6}
    chosen = fastest_tile(3000, 2000, limit, 16, 8, costs)
    assert chosen is not None and chosen <= max(limit, min_tile(16, 8)) and chosen % 8 == 0
    allowed = [t for t in (*costs, limit // 8 * 8) if min_tile(16, 8) <= t <= limit] or [chosen]
    # nothing allowed is cheaper by the margin a smaller tile needs to win
    assert min(plan_cost(3000, 2000, t, 16, 8, costs) for t in allowed) >= (
        plan_cost(3000, 2000, chosen, 16, 8, costs) * (1 - TILE_MIN_GAIN))
    if limit == 512:
        assert chosen == 256  # the cheapest per pixel, and its overlap share is small here


def test_fastest_tile_keeps_a_small_image_whole():
    costs = {128: 1.3, 256: 1.0, 512: 1.6}
    assert fastest_tile(200, 150, 512, 16, 8, costs) is None
    assert fastest_tile(200, 150, 100, 16, 8, costs) is not None  # memory says no


def test_a_smaller_tile_must_win_by_the_margin():
    # whole 512 vs 3x3 tiles of 184 px: 2% cheaper per pixel is not enough, 20% is
    slight, clear = {256: 0.98, 512: 1.0}, {256: 0.8, 512: 1.0}
    assert fastest_tile(512, 512, 512, 16, 8, slight) is None
    assert fastest_tile(512, 512, 512, 16, 8, clear) == 256


@pytest.mark.parametrize(("value", "parsed"), [
    ("auto", "auto"), ("AUTO", "auto"), (" Auto ", "auto"), ("off", 0), ("None", 0), ("0", 0), (0, 0),
    (96, 96), ("96", 96), (96.0, 96), (np.int64(64), 64),
])
def test_parse_tile_reads_every_spelling(value, parsed):
    assert parse_tile(value) == parsed


@pytest.mark.parametrize("value", [True, False, -1, "-1", 12.5, "12.5", "x", "", None, [1]])
def test_parse_tile_refuses_the_rest_saying_why(value):
    with pytest.raises(ValueError) as e:
        parse_tile(value)
    assert str(e.value) == f"tile must be 'auto', 0 (off) or a size in pixels, got {value!r}"


# -- the auto tile (tile="auto"): pure functions of the network's grid, the device and free memory --
def _tiny_grid(tiny_x2: Path) -> TileGrid:
    """The grid of the tiny x2 model as its engine sees it, from the descriptor (nothing loaded)."""
    return Upscaler(tiny_x2, device="cpu", tile="auto", threads=1).tile_grid(2)


def _auto(grid: TileGrid, h: int, w: int, free: float) -> int | None:
    return tile_for("auto", h, w, DEFAULT_TILE_OVERLAP, grid, "cpu", lambda: free, False)


def test_auto_tile_follows_free_memory(tiny_x2):
    grid = _tiny_grid(tiny_x2)
    tile = _auto(grid, 1000, 300, 64 * 2**20)
    assert tile is not None and tile % grid.align == 0 and 64 <= tile < 300
    assert _auto(grid, 100, 80, 64 * 2**30) is None  # fits whole: no tiling at all
    assert auto_tile_limit(grid, "cpu", 64 * 2**30, False) == AUTO_TILE_MAX["cpu"]


@pytest.mark.parametrize("free_mib", [16, 64, 256, 64 * 1024])
def test_auto_tile_stays_within_the_memory_bound(tiny_x2, monkeypatch, free_mib):
    grid = _tiny_grid(tiny_x2)
    free = free_mib * 2**20
    limit = auto_tile_limit(grid, "cpu", free, False)
    for h, w in ((4000, 3000), (1000, 300), (700, 700)):
        tile = _auto(grid, h, w, free)
        assert (tile or max(h, w)) <= max(limit, min_tile(DEFAULT_TILE_OVERLAP, grid.align))
        assert tile is None or tile % grid.align == 0
    # a table where the biggest tile is fastest: the memory bound is what stops it
    monkeypatch.setattr(tiling, "cpu_tile_cost", lambda dtype: {128: 3.0, 512: 1.0})
    assert _auto(grid, 4000, 3000, free) == max(limit // grid.align * grid.align,
                                                min_tile(DEFAULT_TILE_OVERLAP, grid.align))


def test_auto_tile_picks_the_tables_fastest(tiny_x2, monkeypatch):
    grid = _tiny_grid(tiny_x2)
    free = 64 * 2**30
    shipped = cpu_tile_cost(torch.float32)  # this CPU's table
    chosen = _auto(grid, 3000, 4000, free)
    assert chosen in shipped  # the table's sizes are multiples of this model's grid
    costs = {t: plan_cost(3000, 4000, t, DEFAULT_TILE_OVERLAP, grid.align, shipped) for t in shipped}
    assert min(costs.values()) >= costs[chosen] * (1 - TILE_MIN_GAIN)  # a smaller size needs the margin
    for best in (128, 256, 512):  # each size in turn made the cheapest by far: auto follows the table
        table = {t: 1.0 if t == best else 2.0 for t in shipped}
        monkeypatch.setattr(tiling, "cpu_tile_cost", lambda dtype, table=table: table)
        assert _auto(grid, 3000, 4000, free) == best


def test_each_kind_of_cpu_has_its_own_tile_table(monkeypatch):
    tables = {}
    for kind in ("amx", "avx512_bf16", "emulated"):
        monkeypatch.setattr(tiling, "cpu_bf16_kind", lambda kind=kind: kind)
        tables[kind] = cpu_tile_cost(torch.float32)
        assert min(tables[kind].values()) == pytest.approx(1.0, abs=0.01)  # relative to the fastest
    assert tables["emulated"] != tables["amx"]  # measured on the AVX2-only EPYC
    assert tables["avx512_bf16"] == tables["amx"]  # not measured: the other AVX-512 machine's
    monkeypatch.setattr(tiling, "cpu_bf16_kind", lambda: "emulated")
    assert cpu_tile_cost(torch.bfloat16) is None  # bf16 cannot run there: no table


def test_the_engine_asks_free_memory_for_its_auto_tile(tiny_x2, monkeypatch, weight_reads):
    """The engine's wiring of the policy: its auto tile follows what sr.inference.devices reports."""
    from sr.inference import devices
    from sr.request import UpscaleRequest

    up = Upscaler(tiny_x2, device="cpu", tile="auto", threads=1)
    grid = up.tile_grid(2)
    monkeypatch.setattr(devices, "available_memory", lambda device: 64 * 2**20)
    side = up.plan(1000, 300, UpscaleRequest(scale=2)).tiles_side
    assert side == (_auto(grid, 1000, 300, 64 * 2**20),) and side[0] is not None
    monkeypatch.setattr(devices, "available_memory", lambda device: 64 * 2**30)
    assert up.plan(100, 80, UpscaleRequest(scale=2)).tiles_side == (None,)
    assert weight_reads == []  # the tile grid and the plans come from the descriptor alone


def test_an_outside_model_runs_whole_where_its_memory_estimate_allows() -> None:
    """sr's speed table and 512 px CPU cap were measured on sr's networks; a model of another
    architecture tiles only where its memory estimate says it must."""
    from sr.inference.tiling import AUTO_TILE_MAX, auto_tile, auto_tile_limit

    own = TileGrid(4, 1, 64, torch.float32)
    outside = TileGrid(4, 1, 64, torch.float32, measured=False)
    free = 16 * 2**30
    assert auto_tile_limit(own, "cpu", free, False) == AUTO_TILE_MAX["cpu"]
    assert auto_tile_limit(outside, "cpu", free, False) > 1024
    assert auto_tile(1024, 1024, 16, outside, "cpu", free, False) is None
    assert auto_tile(1024, 1024, 16, own, "cpu", free, False) <= AUTO_TILE_MAX["cpu"]
    # little memory: the outside model tiles too, at the side its estimate allows
    side = auto_tile(4000, 3000, 64, outside, "cpu", 2**30, False)
    assert side is not None and side == auto_tile_limit(outside, "cpu", 2**30, False)
