"""Real-ESRGAN general-x4v3 (research.srvgg): size, the residual over nearest, blending, strict loading."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from research.srvgg import SRVGGNetCompact, blend_states, load_srvgg, read_state
from sr.models import count_params

PEERS = Path(__file__).resolve().parents[3] / "shared" / "peers"
GENERAL, WDN = PEERS / "realesr-general-x4v3.pth", PEERS / "realesr-general-wdn-x4v3.pth"
needs_weights = pytest.mark.skipif(not (GENERAL.is_file() and WDN.is_file()), reason=f"{PEERS} absent")


def test_the_network_has_the_released_size_and_layout():
    net = SRVGGNetCompact()
    assert count_params(net) == 1_213_296
    assert len(net.body) == 67 and net.body[-1].out_channels == 48   # body.0 ... body.66


def test_a_zero_body_leaves_the_nearest_upsampling_of_the_input():
    torch.manual_seed(0)
    net = SRVGGNetCompact().eval()
    torch.nn.init.zeros_(net.body[-1].weight)
    torch.nn.init.zeros_(net.body[-1].bias)
    x = torch.rand(2, 3, 7, 9)
    with torch.inference_mode():
        y = net(x)
    assert y.shape == (2, 3, 28, 36)
    assert torch.equal(y, F.interpolate(x, scale_factor=4, mode="nearest"))


def test_blending_interpolates_the_weights_and_refuses_other_networks():
    a = {"w": torch.zeros(2, 3), "b": torch.ones(2)}
    b = {"w": torch.ones(2, 3), "b": torch.full((2,), 3.0)}
    out = blend_states(a, b, 0.25)
    assert torch.allclose(out["w"], torch.full((2, 3), 0.75))
    assert torch.allclose(out["b"], torch.full((2,), 2.5))
    with pytest.raises(ValueError, match="same keys"):
        blend_states(a, {"w": torch.ones(3, 3), "b": b["b"]}, 0.5)


def test_strict_loading_refuses_a_missing_key_or_a_wrong_shape():
    state = SRVGGNetCompact().state_dict()
    with pytest.raises(RuntimeError, match="Missing key"):
        load_srvgg({k: v for k, v in state.items() if k != "body.65.weight"})
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_srvgg({**state, "body.66.bias": torch.zeros(12)})


@needs_weights
def test_the_released_weights_and_their_blend_load_strictly_and_keep_a_flat_colour():
    general = read_state(GENERAL)
    nets = [load_srvgg(GENERAL), load_srvgg(blend_states(general, read_state(WDN), 0.5))]
    x = torch.tensor([0.7, 0.4, 0.2]).view(1, 3, 1, 1).expand(1, 3, 24, 24).contiguous()
    for net in nets:
        assert not net.training
        with torch.inference_mode():
            y = net(x)
        # a trained model leaves a flat RGB colour as it is, away from the zero-padded border
        inner = y[:, :, 16:-16, 16:-16].mean(dim=(2, 3)).flatten()
        assert torch.allclose(inner, x[0, :, 0, 0], atol=0.03)
