"""Light SAFMN++ (research.safmn): the released size, the shapes, the long skip, strict loading."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from research.safmn import LightSAFMNPP, load_light_safmnpp
from sr.models import count_params

WEIGHTS = Path(__file__).resolve().parents[3] / "shared" / "peers" / "light_safmnpp.pth"
needs_weights = pytest.mark.skipif(not WEIGHTS.is_file(), reason=f"{WEIGHTS} absent")


def test_the_light_network_has_the_released_size():
    assert count_params(LightSAFMNPP()) == 66_176   # the README of ../shared/peers


@pytest.mark.parametrize(("h", "w"), [(16, 24), (9, 13), (5, 7)])
def test_any_input_size_comes_out_four_times_larger(h, w):
    # 5x7: under the 8 pixels the 1/8-scale modulation needs; it pools to 1x1 instead
    with torch.inference_mode():
        assert LightSAFMNPP().eval()(torch.rand(2, 3, h, w)).shape == (2, 3, 4 * h, 4 * w)


def test_the_only_skip_is_the_long_one():
    torch.manual_seed(0)
    net = LightSAFMNPP().eval()
    torch.nn.init.zeros_(net.feats[-1].conv2.conv[2].weight)  # the last block outputs zeros
    x = torch.rand(1, 3, 16, 16)
    with torch.inference_mode():
        assert torch.allclose(net(x), net.to_img(net.to_feat(x)), atol=1e-6)


def test_strict_loading_refuses_a_missing_key_or_a_wrong_shape(tmp_path):
    state = LightSAFMNPP().state_dict()
    missing = {k: v for k, v in state.items() if k != "to_img.0.weight"}
    torch.save({"params": missing}, tmp_path / "missing.pth")
    with pytest.raises(RuntimeError, match="Missing key"):
        load_light_safmnpp(tmp_path / "missing.pth")
    wrong = {**state, "feats.0.conv1.dwconv.weight": torch.zeros(8, 1, 3, 3)}
    torch.save({"params": wrong}, tmp_path / "wrong.pth")
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_light_safmnpp(tmp_path / "wrong.pth")


@needs_weights
def test_the_released_weights_load_strictly_and_upscale_a_smooth_image():
    net = load_light_safmnpp(WEIGHTS)
    assert not net.training
    # a smooth colour ramp: a trained x4 model returns the same ramp, four times larger
    yy, xx = torch.meshgrid(torch.linspace(0.2, 0.8, 24), torch.linspace(0.3, 0.7, 32), indexing="ij")
    x = torch.stack([yy, xx, (yy + xx) / 2])[None]
    with torch.inference_mode():
        y = net(x)
    ref = torch.nn.functional.interpolate(x, scale_factor=4, mode="bilinear", align_corners=False)
    inner = (slice(None), slice(None), slice(8, -8), slice(8, -8))   # the borders are padded zeros
    assert (y[inner] - ref[inner]).abs().mean() < 0.02
