"""The whole SR network: shapes, determinism, every attention kind, gradients, registry errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sr.models import PRESETS, build_config, build_model, count_params, parse_name
from sr.models.attention import ATTENTION_KINDS, AdaptiveSparseAttention, make_attention


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_maps_odd_sizes_to_scaled_outputs_deterministically(preset):
    torch.manual_seed(0)
    model = build_model(f"{preset}-x2").eval()
    for h, w in ((17, 23), (1, 1), (5, 3)):
        x = torch.rand(2, 3, h, w)
        with torch.no_grad():
            y1, y2 = model(x), model(x)
        assert y1.shape == (2, 3, 2 * h, 2 * w)
        assert torch.isfinite(y1).all()
        assert torch.equal(y1, y2)


@pytest.mark.parametrize("scale", [3, 4])
def test_other_scales(scale):
    model = build_model(f"asa-small-x{scale}").eval()
    with torch.no_grad():
        y = model(torch.rand(1, 3, 7, 9))
    assert y.shape == (1, 3, 7 * scale, 9 * scale)


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_the_output_is_the_nearest_neighbour_upsample_plus_the_learned_residual(scale):
    # The image-level skip: output = nearest upsample + the upsampling conv's residual, so with that
    # conv zeroed (no residual) the output is the nearest-neighbour upsample, bit for bit.
    torch.manual_seed(0)
    model = build_model(f"asa-small-x{scale}").eval()
    x = torch.rand(1, 3, 12, 10)
    with torch.no_grad():
        model.upsample.weight.zero_()
        model.upsample.bias.zero_()
        y = model(x)
    assert torch.equal(y, F.interpolate(x, scale_factor=scale, mode="nearest"))


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_every_attention_kind_builds_and_runs(kind):
    torch.manual_seed(0)
    model = build_model("asa-small-x2", attention=kind)
    n_attn = sum(hasattr(m, "attend") for m in model.body)
    preset = PRESETS["asa-small"]
    assert n_attn == (0 if kind == "none" else preset["blocks"] // preset["attn_every"])
    x = torch.rand(1, 3, 9, 13)
    with torch.no_grad():
        y = model.eval()(x)
    assert y.shape == (1, 3, 18, 26) and torch.isfinite(y).all()
    aux: dict = {}
    y = model.train()(x, aux)
    y.mean().backward()
    assert y.shape == (1, 3, 18, 26)
    assert ("budget_maps" in aux) == (kind == "adaptive")
    if kind == "adaptive":
        assert all(m.shape == (1, 1, 9, 13) for m in aux["budget_maps"])


def test_budget_maps_of_the_default_network_hit_the_target_in_eval():
    torch.manual_seed(0)
    model = build_model("asa-base-x2").eval()
    x = torch.rand(1, 3, 32, 32)
    x[..., 16:] = 0.5  # a flat half
    aux: dict = {}
    with torch.no_grad():
        model(x, aux)
    budget = PRESETS["asa-base"]["attn_options"]["budget"]
    assert len(aux["budget_maps"]) == 2
    for kmap in aux["budget_maps"]:
        assert kmap.shape == (1, 1, 32, 32)
        assert abs(kmap.mean().item() - budget) <= 0.25


def test_every_parameter_of_the_default_network_gets_a_gradient():
    torch.manual_seed(0)
    model = build_model("asa-base-x2").train()
    x = torch.rand(2, 3, 24, 24)
    hr = torch.rand(2, 3, 48, 48)
    aux: dict = {}
    loss = F.l1_loss(model(x, aux), hr) + 0.01 * aux["budget_loss"]
    loss.backward()
    gates = [n for n, _ in model.named_parameters() if ".gate." in n]
    assert gates  # the gate is there and is checked below like everything else
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, name


def test_bf16_autocast_forward_is_finite():
    torch.manual_seed(0)
    model = build_model("asa-small-x2").train()
    x = torch.rand(2, 3, 16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
    assert torch.isfinite(y.float()).all()


def test_param_count_is_stable_for_the_default_preset():
    # Parameter names/shapes are a checkpoint's contract: the count changes only with them.
    model = build_model("asa-base-x2")
    assert count_params(model) == sum(p.numel() for p in model.state_dict().values())
    assert {type(m).__name__ for m in model.body if hasattr(m, "attend")} == {"AdaptiveSparseAttention"}


# --- registry errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nope-x2", "asa-base-x5", "asa-base", "asa-base-x", "", "x2"])
def test_unknown_model_names_are_clear_value_errors(name):
    with pytest.raises(ValueError, match="unknown model") as err:
        build_model(name)
    assert "asa-base-x{2,3,4}" in str(err.value)
    with pytest.raises(ValueError):
        parse_name(name)


def test_unknown_preset_and_attention_kind_are_clear_value_errors():
    with pytest.raises(ValueError, match=r"unknown preset 'nope'; known: asa-small"):
        build_config("nope", 2)
    with pytest.raises(ValueError, match=r"unknown attention 'bogus'; choose from none, dense, window"):
        make_attention("bogus", 16, 2)
    with pytest.raises(ValueError, match="unknown attention 'bogus'"):
        build_model("asa-small-x2", attention="bogus")


def test_invalid_attention_settings_are_value_errors():
    with pytest.raises(ValueError, match="not divisible by heads"):
        make_attention("dense", 10, 3)
    with pytest.raises(ValueError, match="k_min <= budget <= k_max"):
        AdaptiveSparseAttention(16, 2, k_min=0, k_max=4, budget=6.0)
    with pytest.raises(ValueError, match="scale must be 2, 3 or 4"):
        build_model(build_config("asa-small", 5))


def test_set_attention_budget_retargets_every_adaptive_block_and_counts_them():
    model = build_model("asa-small-x2")
    blocks = model.adaptive_blocks()
    assert len(blocks) == sum(isinstance(m, AdaptiveSparseAttention) for m in model.modules()) > 0
    assert model.set_attention_budget(2.5) == len(blocks)
    assert {b.budget for b in blocks} == {2.5}
    assert build_model("asa-small-x2", attention="window").set_attention_budget(1) == 0
