"""A community model as users have it: Real-ESRGAN general x4v3 (../shared/peers, BSD-3-Clause; 1.2 M
parameters), skipped where the checkout has no ../shared. ``sr upscale --scale 4`` on an image that fits
one tile gives spandrel's untiled call; tiled with an overlap that covers the model's reach (32 3x3
convolutions: 64 px, not the default 16), the same within 1e-3."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from sr import weights as sr_weights
from sr.cli import main
from sr.inference import Upscaler
from sr.io import DecodedImage, read_image
from tests.external.models import spandrel_call

spandrel = pytest.importorskip("spandrel", reason="the models extra: pip install -e '.[models]'")
REPO = Path(__file__).resolve().parents[2]
GENERAL_X4 = REPO / ".." / "shared" / "peers" / "realesr-general-x4v3.pth"
pytestmark = pytest.mark.skipif(not GENERAL_X4.is_file(), reason="../shared/peers/realesr-general-x4v3.pth "
                                                                  "not present")


@pytest.fixture(autouse=True)
def _restore_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # sr.cli.main rewrites sys.argv


def crop(h: int, w: int) -> np.ndarray:
    """A part of data/coffee.png (240 x 160): a photo."""
    return read_image(REPO / "data" / "coffee.png").pixels[:h, :w]


def test_described_as_spandrel_states_it():
    desc = sr_weights.describe(GENERAL_X4)
    assert (desc.architecture, desc.scale, desc.purpose) == ("RealESRGAN Compact", 4, "upscale")
    assert desc.arch.params == 1_213_296 and desc.supports_bf16 and desc.tiling == "supported"


def test_upscale_scale_4_is_spandrels_call(tmp_path, capsys):
    from PIL import Image

    x = np.round(crop(48, 64) * 255).astype(np.uint8)
    Image.fromarray(x).save(tmp_path / "in.png")
    assert main(["upscale", str(tmp_path / "in.png"), "-o", str(tmp_path / "out"), "--model", str(GENERAL_X4),
                 "--scale", "4", "--precision", "fp32", "--threads", "2"]) == 0
    assert "1 done, 0 skipped, 0 failed" in capsys.readouterr().out
    got = np.round(read_image(tmp_path / "out" / "in_x4.png").pixels * 255)
    want = spandrel_call(GENERAL_X4, x / np.float32(255))
    assert got.shape == (192, 256, 3)
    assert np.abs(got - np.clip(want, 0, 1) * 255).max() <= 1 / 2 + 1e-3  # the same rounding


def test_tiles_with_an_overlap_covering_the_models_reach_give_the_untiled_answer():
    """32 convolutions reach 33 px; tiles cross-fade over the middle half of the overlap, so a tile's
    pixels that count lie at least overlap / 4 from its cut. Max abs difference from the untiled
    call on this 120 x 300 input, measured: 5.2e-4 at overlap 64 (tile 193), 9.7e-4 at 72 (tile
    217), 5.4e-3 at 40 (tile 121), and 1.2e-1 (31 levels of 255: a seam) at the default 16 px
    overlap with 64 px tiles."""
    x = np.concatenate([crop(120, 150)] * 2, axis=1)
    want = spandrel_call(GENERAL_X4, x)
    up = Upscaler(GENERAL_X4, device="cpu", threads=2, tile=193, tile_overlap=64, precision="fp32")
    got = up.upscale(DecodedImage(x)).image.pixels
    assert got.shape == (480, 1200, 3) and np.abs(got - want).max() <= 1e-3
