"""sr.external.receptive: an outside model's tile overlap from its measured reach, once per file."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sr import weights as sr_weights
from sr.inference import Upscaler
from sr.io import DecodedImage
from sr.request import UpscaleRequest

spandrel = pytest.importorskip("spandrel", reason="the models extra: pip install -e '.[models]'")
from spandrel.architectures.Compact import Compact  # noqa: E402

from sr.external import receptive  # noqa: E402


def compact(tmp_path, convs: int):
    from safetensors.torch import save_file

    torch.manual_seed(convs)
    net = Compact(num_in_ch=3, num_out_ch=3, num_feat=8, num_conv=convs, upscale=2)
    with torch.no_grad():  # a trained model's gain: at the default init the signal fades with depth
        for m in net.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.weight.normal_(0, 1.5 / math.sqrt(9 * m.in_channels))
    path = tmp_path / f"compact-{convs}.safetensors"
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))
    return sr_weights.describe(path)


@pytest.mark.parametrize("convs", [4, 20])
def test_the_measured_radius_is_the_chain_of_3x3_convolutions(tmp_path, convs: int) -> None:
    # Compact: a first conv, `convs` body convs and a last conv, all 3x3: each reaches one pixel more
    assert receptive.measure_radius(compact(tmp_path, convs)) == convs + 2


def test_the_overlap_is_four_times_the_reach_and_never_under_the_engine_s(tmp_path) -> None:
    assert receptive.suited_overlap(compact(tmp_path, 2), 16) == 16  # reach 4 -> 16
    assert receptive.suited_overlap(compact(tmp_path, 4), 16) == 24  # reach 6 -> 24
    assert receptive.suited_overlap(compact(tmp_path, 20), 16) == 88  # reach 22 -> 88
    assert receptive.suited_overlap(compact(tmp_path, 20), 96) == 96
    assert receptive.suited_overlap(compact(tmp_path, 40), 16) == receptive.MAX_OVERLAP  # reach 42: capped


def test_measured_once_per_file(tmp_path, monkeypatch) -> None:
    desc = compact(tmp_path, 20)
    calls = []
    real = receptive.measure_radius
    monkeypatch.setattr(receptive, "measure_radius", lambda d: calls.append(d) or real(d))
    assert receptive.suited_overlap(desc, 16) == receptive.suited_overlap(desc, 16) == 88
    assert len(calls) == 1


def test_a_deep_model_tiles_seam_free_with_its_overlap(tmp_path) -> None:
    desc = compact(tmp_path, 20)
    x = np.random.default_rng(0).random((300, 320, 3), dtype=np.float32)
    whole = Upscaler(desc.path, device="cpu", threads=1, tile=None, precision="fp32").upscale(DecodedImage(x))
    tiled = Upscaler(desc.path, device="cpu", threads=1, tile=280, precision="fp32")
    assert tiled.plan(300, 320, UpscaleRequest(model=str(desc.path))).tiles >= 4
    diff = np.abs(tiled.upscale(DecodedImage(x)).image.pixels - whole.image.pixels).max()
    # the 88 px overlap's weighted part lies beyond the 22 px reach: float rounding only
    assert diff <= 1e-5
    narrow = Upscaler(desc.path, device="cpu", threads=1, tile=280, tile_overlap=16, precision="fp32")
    assert narrow.tile_overlap == 16  # the engine's setting; the pass widens it for this model
