"""``sr bench cost``: the bypass, the conv count, a tiny run's table and JSON, bad options."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from benchmarks.cost import attention_bypassed, conv_macs, routed_core_free
from sr.cli import main
from sr.models.attention import AttentionBranch
from sr.models.registry import build_model


def test_bypass_makes_every_attention_block_return_its_input_and_restores_it():
    torch.manual_seed(0)
    net = build_model("asa-base-x2").eval()
    for m in net.modules():  # a visible attention: the shipped init's projection is near zero
        if isinstance(m, AttentionBranch):
            nn.init.normal_(m.proj.weight, std=0.5)
    x = torch.rand(1, 3, 24, 24)
    with torch.no_grad():
        before = net(x)
        with attention_bypassed(net) as n_blocks:
            bypassed = net(x)
            # by hand: the body without its attention layers
            feat = net.head(x)
            y = feat
            for layer in net.body:
                if not isinstance(layer, AttentionBranch):
                    y = layer(y)
            y = net.body_tail(y) + feat
            by_hand = net.shuffle(net.upsample(y) + x.repeat_interleave(4, dim=1))
        after = net(x)
    assert n_blocks == 2
    torch.testing.assert_close(bypassed, by_hand, rtol=0, atol=0)
    assert (bypassed - before).abs().max() > 1e-3  # the attention did change the output
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    assert not any("forward" in vars(m) for m in net.modules())


def test_core_free_zeroes_only_the_routed_core_and_restores_it():
    """With the core free, each attention block adds proj(lepe(v)) alone: checked against a network
    whose core output is zero by hand (every region's budget 0), and the core comes back after."""
    torch.manual_seed(0)
    net = build_model("asa-base-x2").eval()
    blocks = [m for m in net.modules() if isinstance(m, AttentionBranch)]
    for m in blocks:
        nn.init.normal_(m.proj.weight, std=0.5)
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        before = net(x)
        with routed_core_free():
            free = net(x)
        for m in blocks:  # the same by hand: a budget of 0 skips the core (its output is zero)
            m.set_budget(0)
        skipped = net(x)
        after_budget = [m.budget for m in blocks]
    assert after_budget == [0.0, 0.0]
    torch.testing.assert_close(free, skipped, rtol=0, atol=0)
    assert (free - before).abs().max() > 1e-3  # the core did contribute before


def test_conv_macs_counts_kernels_groups_and_output_size():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1, groups=8),
                        nn.Conv2d(8, 4, 1), nn.ReLU())
    x = torch.rand(1, 3, 10, 12)
    assert conv_macs(net, x) == 10 * 12 * (8 * 3 * 9 + 8 * 1 * 9 + 4 * 8 * 1)
    assert conv_macs(net, x) == conv_macs(net, x)  # the hooks are gone after each count


def test_tiny_run_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "cost.json"
    rc = main(["bench", "cost", "--models", "asa-base-x2", "--precision", "fp32", "--tiles", "32,48",
               "--rounds", "2", "--peak-size", "128", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| asa-base-x2 | fp32 | 32^2 |" in text and "attention share" in text and "core free" in text
    data = json.loads(out.read_text())
    rows = {r["tile"]: r for r in data["rows"]}
    assert set(rows) == {32, 48}
    # asa-base: head 3->48, 7 residual blocks of two 48->48 convs, body tail, upsampler 48->12, all 3x3
    per_pixel = 9 * (3 * 48 + 15 * 48 * 48 + 48 * 12)
    for tile, r in rows.items():
        assert r["conv_gmacs"] * 1e9 == pytest.approx(per_pixel * tile * tile)
        assert r["forward_ms"] > 0 and r["body_ms"] > 0 and 0 <= r["attention_share"] < 1
        assert r["free_core_ms"] > 0 and 0 <= r["free_core_share"] < 1
        assert r["attention_blocks"] == 2 and r["peak_tflops"] > 0
        assert r["conv_tflops"] == pytest.approx(2 * r["conv_gmacs"] * 1e9 / (r["body_ms"] / 1e3) / 1e12)
    assert data["config"]["threads"] == 1


@pytest.mark.parametrize("argv, message", [
    (["--precision", "fp16"], "unknown fp16"),
    (["--models", "asa-base"], "is a family"),
    (["--rounds", "0"], "--rounds must be >= 1"),
])
def test_bad_options_are_one_clear_line(argv, message, capsys):
    rc = main(["bench", "cost", "--tiles", "16", "--precision", "fp32", "--peak-size", "64", *argv])
    err = capsys.readouterr().err
    assert rc != 0 and message in err and "Traceback" not in err


def test_a_tile_under_8_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "cost", "--tiles", "4"])
    assert exc.value.code == 2 and "tile sides must be integers >= 8" in capsys.readouterr().err
