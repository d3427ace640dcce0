"""The attention registry: kinds by name, their options, alignment and budget caps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sr.commands.info import attention_summary
from sr.models import NetConfig, SRNet, build_model, set_attention_path
from sr.models.attention import (
    ATTENTION_KINDS,
    AdaptiveSparseAttention,
    AttentionBranch,
    DenseAttention,
    TopkAttention,
    WindowAttention,
    attention_k_max,
    attention_kinds,
    get_attention,
    make_attention,
    register_attention,
    registry,
)


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made in a test vanish after it (a copy of the registry stands in)."""
    monkeypatch.setattr(registry, "_VARIANTS", dict(registry._VARIANTS))


def test_built_in_kinds_in_registration_order():
    # the built-ins first, in this order; the package's other modules register after them
    # one explicit list (sr/models/attention/__init__.py), in its order: no module is picked up unlisted
    assert ATTENTION_KINDS == ("none", "dense", "window", "topk", "adaptive", "cbam", "channel", "channel-sa",
                               "dilated", "linear", "local", "spatial")
    assert attention_kinds()[: len(ATTENTION_KINDS)] == ATTENTION_KINDS


def test_make_attention_builds_what_each_kind_names():
    assert isinstance(make_attention("none", 8, 2), nn.Identity)
    assert type(make_attention("dense", 8, 2, stride=2)) is DenseAttention
    even, odd = (make_attention("window", 8, 2, i, window=4) for i in (0, 1))
    assert type(even) is WindowAttention and (even.shift, odd.shift) == (0, 2)  # odd blocks shift
    topk = make_attention("topk", 8, 2, region=2, k=3)
    assert type(topk) is TopkAttention and (topk.region, topk.k) == (2, 3)
    asa = make_attention("adaptive", 8, 2, k_max=6, budget=3.0, detail_prior=0.25)
    assert type(asa) is AdaptiveSparseAttention
    assert (asa.region, asa.k_min, asa.k_max, asa.budget, asa.gate.detail_prior) == (4, 0, 6, 3.0, 0.25)


def test_options_of_other_kinds_are_ignored_and_typos_are_not():
    # one attn_options dict serves every kind: an ablation swaps the kind and keeps the options
    assert make_attention("dense", 8, 2, region=4, k_max=8, window=8).stride == 1
    with pytest.raises(TypeError, match="unexpected option"):
        make_attention("dense", 8, 2, regoin=4)


def test_unknown_kind_lists_the_registered_ones():
    with pytest.raises(ValueError) as err:
        make_attention("bogus", 8, 2)
    assert str(err.value).startswith(
        "unknown attention 'bogus'; choose from none, dense, window, topk, adaptive"
    )


def test_each_variant_states_its_alignment():
    assert make_attention("dense", 8, 2, stride=2).align == 1
    assert make_attention("window", 8, 2, window=8, stride=2).align == 16
    assert make_attention("topk", 8, 2, region=4, stride=2).align == 8
    assert make_attention("adaptive", 8, 2, region=3, stride=2).align == 6


def test_budget_caps_come_from_the_kind():
    assert get_attention("adaptive").k_max() == 8.0  # the builder's default
    assert attention_k_max("adaptive", {"k_max": 6, "region": 4}) == 6.0
    for kind in ("none", "dense", "window", "topk"):
        assert attention_k_max(kind, {"k_max": 6}) is None
    assert attention_k_max("not-installed", {"k_max": 6}) is None
    assert attention_k_max(None) is None


def test_static_path_reaches_the_variants_that_have_one():
    model = build_model("asa-small-x2", attention="topk")
    assert set_attention_path(model, "static") == 2
    assert all(m.static for m in model.modules() if isinstance(m, TopkAttention))
    assert set_attention_path(build_model("asa-small-x2", attention="window"), "static") == 0


def test_registration_errors(scratch_registry):
    with pytest.raises(ValueError, match="'dense' is already registered"):
        register_attention("dense")(lambda dim, heads, index: nn.Identity())
    with pytest.raises(TypeError, match="options need defaults"):
        register_attention("t-nodefault")(lambda dim, heads, index, *, size: nn.Identity())
    with pytest.raises(TypeError, match=r"must take \(dim, heads, index"):
        register_attention("t-noindex")(lambda dim, heads: nn.Identity())
    with pytest.raises(TypeError, match="has no option"):
        register_attention("t-cap", budget_option="cap")(lambda dim, heads, index, *, k=1: nn.Identity())


class Scaled(AttentionBranch):
    """Test-only: an attention core that returns v scaled."""

    def __init__(self, dim: int, heads: int, scale: float) -> None:
        super().__init__(dim, heads)
        self.scale = scale

    def attend(self, q, k, v, x, aux):
        return v * self.scale


def test_a_variant_registered_here_builds_into_a_network_and_is_described(scratch_registry):
    @register_attention("t-scaled")
    def build(dim: int, heads: int, index: int, *, scale: float = 0.5) -> Scaled:
        return Scaled(dim, heads, scale)

    assert attention_kinds()[-1] == "t-scaled"
    cfg = NetConfig(scale=2, channels=8, blocks=2, attn_every=1, heads=2, attention="t-scaled",
                    attn_options={"scale": 0.25, "region": 4})
    net = SRNet(cfg).eval()
    assert [m.scale for m in net.modules() if isinstance(m, Scaled)] == [0.25, 0.25]
    assert net(torch.rand(1, 3, 5, 6)).shape == (1, 3, 10, 12)
    assert attention_summary(cfg) == "t-scaled (scale=0.25)"
    assert get_attention("t-scaled").k_max(cfg.attn_options) is None


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_conv_base_is_asa_base_without_attention_at_equal_macs(scale):
    from sr.models import build_model, count_macs

    conv, asa = build_model(f"conv-base-x{scale}"), build_model(f"asa-base-x{scale}")
    assert conv.cfg.attention == "none"
    assert conv.cfg.to_dict() == build_model(f"asa-base-x{scale}", attention="none").cfg.to_dict()
    hw = (48 * scale, 64 * scale)
    assert abs(count_macs(conv, hw) / count_macs(asa, hw) - 1) < 0.05
