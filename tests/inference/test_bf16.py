"""bf16 against fp32 through the whole engine: plain, tiled and static paths, and the budget maps.

Tolerance: outputs within 45 dB PSNR of fp32's (docs/inference.md's bar; measured 56-57 dB for the
tiny model and asa-base-x2 here), budget maps within a few flipped regions (bf16 can move a routing
score across a top-k boundary, which changes that region's count, never the map's meaning).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sr.inference import Upscaler
from sr.io import DecodedImage, read_image
from sr.metrics import float_psnr

pytestmark = pytest.mark.cpu_bf16  # every test here runs bf16 convolutions on the CPU

MIN_PSNR_DB = 45.0
MIN_SAME_BUDGET = 0.95  # share of budget-map pixels equal in both precisions
PHOTO = Path(__file__).resolve().parents[2] / "data" / "chelsea.png"
PATHS = {"plain": dict(tile=0), "tiled": dict(tile=64), "static": dict(tile=64, attention_path="static")}


@pytest.fixture(scope="module")
def photo() -> DecodedImage:
    return DecodedImage(read_image(PHOTO).pixels[:150, :170])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("model", ["tiny", "asa-base-x2"])
def test_bf16_output_and_budget_map_match_fp32(path, model, photo, tiny_x2):
    weights = tiny_x2 if model == "tiny" else model
    options = dict(device="cpu", threads=1, **PATHS[path])
    engines = [Upscaler(weights, precision=p, **options) for p in ("fp32", "bf16")]
    fp32, bf16 = (up.upscale(photo, with_budget_map=True) for up in engines)
    assert bf16.image.pixels.dtype == np.float32 and bf16.image.pixels.shape == fp32.image.pixels.shape
    assert np.any(bf16.image.pixels != fp32.image.pixels)  # bf16 did run
    assert float_psnr(bf16.image.pixels, fp32.image.pixels) >= MIN_PSNR_DB
    assert bf16.budget_map.shape == fp32.budget_map.shape
    assert np.isfinite(bf16.budget_map).all() and bf16.budget_map.min() >= 0
    assert bf16.budget_map.max() <= Upscaler(weights, device="cpu").k_max
    assert np.mean(np.abs(bf16.budget_map - fp32.budget_map) < 1e-6) >= MIN_SAME_BUDGET
