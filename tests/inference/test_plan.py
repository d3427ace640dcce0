"""Upscaler.plan: the output size, passes and tile count of the upscale the engine then runs."""

from __future__ import annotations

import numpy as np
import pytest

from sr.inference import UpscaleError, Upscaler
from sr.inference.family import FamilyEngine
from sr.io import DecodedImage
from sr.request import UpscaleRequest


def _image(h: int, w: int) -> DecodedImage:
    rng = np.random.default_rng(0)
    return DecodedImage(pixels=rng.random((h, w, 3), dtype=np.float32))


@pytest.mark.parametrize("tile, h, w, request_", [
    (48, 100, 70, UpscaleRequest()),                   # 3 x 2 tiles
    (48, 40, 130, UpscaleRequest(tta=True)),           # one row of tiles, x8 views
    (0, 50, 30, UpscaleRequest()),                     # tiling off: one forward
    (64, 40, 60, UpscaleRequest(outscale=4)),          # two x2 passes, the second one tiled
])
def test_plan_counts_the_tiles_the_engine_runs(tiny_x2, tile, h, w, request_) -> None:
    up = Upscaler(model=str(tiny_x2), device="cpu", tile=tile, tile_overlap=8, threads=1)
    plan = up.plan(h, w, request_)
    forwards: list[tuple[int, int]] = []  # (h, w) of every network forward: each tile, each tta view
    up.network(2).register_forward_pre_hook(lambda net, args: forwards.append(tuple(args[0].shape[-2:])))
    res = up.upscale(_image(h, w), scale=request_.scale, outscale=request_.outscale, tta=request_.tta)
    views = 8 if request_.tta else 1
    assert (res.image.height, res.image.width) == plan.out_size
    assert plan.tiles == len(forwards)
    assert plan.tiled_pixels == sum(a * b * 4 for a, b in forwards)  # tiny is x2: 4 out per in
    assert plan.work_pixels == views * sum(h * w * 4**(i + 1) for i in range(len(plan.passes)))
    assert plan.tiles > views or tile == 0
    # each pass's tile side: no forward larger (None when a pass runs whole)
    assert len(plan.tiles_side) == len(plan.passes)
    assert tile == 0 or max(max(a, b) for a, b in forwards) <= max(t or 0 for t in plan.tiles_side)
    assert all(t is None for t in plan.tiles_side) == (tile == 0)


@pytest.mark.parametrize("request_", [UpscaleRequest(), UpscaleRequest(outscale=3, tta=True)])
def test_plan_loads_nothing_and_equals_the_plan_after_loading(weights_dir, request_, weight_reads) -> None:
    reads = weight_reads
    up = Upscaler("tiny", device="cpu", weights_dir=weights_dir, tile=48, tile_overlap=8, threads=1)
    fresh = up.plan(100, 70, request_)
    assert reads == []  # from the descriptors alone: no weights read
    up.load()
    assert sorted(reads) == ["tiny-x2", "tiny-x3", "tiny-x4"]
    assert up.plan(100, 70, request_) == fresh


def test_a_family_engine_runs_only_the_scales_it_is_given(weights_dir) -> None:
    restricted = FamilyEngine("tiny", device="cpu", weights_dir=weights_dir, threads=1, scales=[2, 4])
    assert restricted.scales == [2, 4]
    assert restricted.plan_size(10, 10, outscale=3)[1] == [4]  # x3 is not among its scales
    with pytest.raises(Exception, match="scale 3 is not available"):
        restricted.check_scale(3)


@pytest.mark.parametrize("asked", [
    {"width": 0}, {"height": -3}, {"width": 2.5}, {"outscale": 0}, {"outscale": float("nan")},
    {"outscale": True}, {"outscale": 2, "width": 10},
])
def test_a_bad_output_size_gets_the_requests_own_sentence(tiny_x2, asked) -> None:
    # one rule for how a size is asked (sr.request.check_output_size): a Python caller of the engine
    # hears what sr upscale and the service say (with the field names)
    up = Upscaler(model=str(tiny_x2), device="cpu", threads=1)
    with pytest.raises(ValueError) as by_request:
        UpscaleRequest(**asked).validate()
    with pytest.raises(UpscaleError) as by_engine:
        up.plan_size(8, 8, **asked)
    assert str(by_engine.value) == str(by_request.value)
