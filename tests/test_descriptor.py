"""ModelDescriptor: one object with network, scale, alignment, budget cap and metadata, from sr.weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sr import DEFAULT_MODEL
from sr.descriptor import ModelDescriptor, family_of
from sr.inference import Upscaler, list_models
from sr.io import DecodedImage
from sr.models import NetConfig, SRNet, count_params
from sr.models.attention import AttentionBranch
from sr.shipped import SCALES
from sr.weights import WeightsError, catalog, describe, find_models, load_model, loaded, save_weights


def test_a_shipped_model_described_and_loaded() -> None:
    desc = load_model("asa-base-x2")
    assert (desc.name, desc.family, desc.preset, desc.scale) == ("asa-base-x2", "asa-base", "asa-base", 2)
    assert desc.attention == "adaptive" and desc.has_budget and desc.k_max == 8.0
    assert desc.align == 8  # stride 2 x region 4
    assert isinstance(desc.net, SRNet) and not desc.net.training
    assert desc.params == count_params(desc.net)
    assert desc.steps and desc.steps > 0 and desc.train_data
    assert set(desc.validation) >= {"Set5", "Set14"}
    assert desc.path is not None and desc.path.name == "asa-base-x2.safetensors"
    # metadata only: the same answers before a tensor is read
    cheap = describe(desc.path)
    assert cheap.net is None and (cheap.k_max, cheap.align, cheap.scale) == (8.0, 8, 2)


def test_the_default_family_ships_every_scale() -> None:
    # what `sr upscale`, the engine and the service load when no model is named
    name, found = find_models(DEFAULT_MODEL)
    assert name == DEFAULT_MODEL and sorted(found) == list(SCALES)
    assert all(d.family == DEFAULT_MODEL and d.validation for d in found.values())


def test_a_tiny_model_without_attention(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = SRNet(NetConfig(scale=3, channels=8, blocks=2, attention="none"))
    path = save_weights(net, tmp_path / "mine-x3.safetensors", steps="12", train_data=json.dumps(["a"]))
    desc = describe(path)
    assert (desc.name, desc.family, desc.scale, desc.steps) == ("mine-x3", "mine", 3, 12)
    assert desc.k_max is None and not desc.has_budget and desc.align == 1
    assert desc.preset == "custom" and desc.validation == {}
    with_net = loaded(desc)
    assert with_net.net is not None and desc.net is None  # loaded() returns a new descriptor
    assert torch.equal(with_net.net.head.weight, net.head.weight)
    name, found = find_models("mine", tmp_path)
    assert name == "mine" and list(found) == [3] and found[3].path == path
    assert [d.name for d in catalog(tmp_path)] == ["mine-x3"]


def test_an_in_memory_network_runs_through_the_engine() -> None:
    torch.manual_seed(0)
    net = SRNet(NetConfig(scale=2, channels=8, blocks=2, attn_every=2, heads=2, attention="window",
                          attn_options={"window": 4}))
    desc = ModelDescriptor.from_net(net.eval(), "win-x2")
    assert desc.align == max(m.align for m in net.modules() if isinstance(m, AttentionBranch))
    up = Upscaler(desc, device="cpu", tile=None, threads=1)
    assert up.name == "win-x2" and up.scales == [2] and up.k_max is None
    out = up.upscale(DecodedImage(torch.rand(9, 11, 3).numpy()))
    assert out.image.pixels.shape == (18, 22, 3) and out.model == "win-x2"


def test_resolution_errors(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="unknown model 'nothing'"):
        find_models("nothing", tmp_path)
    with pytest.raises(WeightsError, match="not a weights file"):
        find_models("a/b", tmp_path)
    (tmp_path / "bad.safetensors").write_bytes(b"junk")
    assert catalog(tmp_path) == []  # unreadable files are not models
    assert list_models(tmp_path) == []
    assert family_of("asa-base-x2") == "asa-base" and family_of("asa-base-x7") == "asa-base-x7"


@pytest.mark.parametrize("attention, options", [
    ("adaptive", {"region": 4, "stride": 2}), ("adaptive", {"region": 2, "stride": 3}),
    ("topk", {"region": 8}),
    ("window", {"window": 4, "stride": 2}), ("dense", {"stride": 2}), ("none", {}),
])
def test_the_config_states_the_alignment_the_built_network_has(attention, options) -> None:
    from sr.descriptor import config_align, net_align

    cfg = NetConfig(scale=2, channels=8, blocks=4, attn_every=2, heads=2, attention=attention,
                    attn_options=options)
    assert config_align(cfg) == net_align(SRNet(cfg))
    assert ModelDescriptor(cfg, "x").align == config_align(cfg)  # unloaded: from the config alone
