"""``sr bench train`` on a tiny batch: configurations, ratios to ``none``, JSON and errors."""

from __future__ import annotations

import json

import pytest

from benchmarks.train import configurations
from sr.cli import main


def test_configurations_add_none_per_preset_and_kinds_on_the_default_preset():
    assert configurations(["asa-small", "asa-base"], ["none", "window", "adaptive"]) == [
        ("asa-small", "adaptive"), ("asa-small", "none"),
        ("asa-base", "none"), ("asa-base", "window"), ("asa-base", "adaptive"),
    ]


def test_tiny_run_reports_step_times_and_ratios(tmp_path, capsys):
    out = tmp_path / "train.json"
    rc = main(["bench", "train", "--presets", "asa-base", "--kinds", "none,topk", "--batch", "2",
               "--patch", "12", "--steps", "1", "--warmup", "0", "--threads", "1", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "it/s" in text and "x none" in text and "the same network without attention" in text
    results = json.loads(out.read_text())["results"]
    assert [(r["preset"], r["attention"]) for r in results] == [
        ("asa-base", "none"), ("asa-base", "topk"), ("asa-base", "adaptive")]
    for r in results:
        assert r["step_ms"] > 0 and r["it_s"] == pytest.approx(1000 / r["step_ms"])
        assert r["ratio_to_none"] == pytest.approx(r["step_ms"] / results[0]["step_ms"])
    assert results[0]["params"] < results[2]["params"]  # attention adds parameters
    assert {r["layout"] for r in results} == {"channels-last"}  # the trainer's layout by default


def test_two_layouts_are_timed_side_by_side_with_ratios_per_layout(tmp_path, capsys):
    out = tmp_path / "train.json"
    rc = main(["bench", "train", "--presets", "asa-base", "--kinds", "none", "--layouts",
               "channels-last,contiguous", "--batch", "2", "--patch", "12", "--steps", "1", "--warmup", "0",
               "--threads", "1", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "asa-base adaptive: contiguous step = " in text and "x channels-last's" in text
    results = json.loads(out.read_text())["results"]
    assert [(r["attention"], r["layout"]) for r in results] == [
        ("none", "channels-last"), ("adaptive", "channels-last"),
        ("none", "contiguous"), ("adaptive", "contiguous"),
    ]
    for r in results:  # each layout's ratio is to its own conv-only network
        base = next(b for b in results if b["layout"] == r["layout"] and b["attention"] == "none")
        assert r["ratio_to_none"] == pytest.approx(r["step_ms"] / base["step_ms"])


def test_profile_lists_each_configurations_costliest_operators(tmp_path, capsys):
    out = tmp_path / "train.json"
    rc = main(["bench", "train", "--presets", "asa-base", "--kinds", "none", "--batch", "2", "--patch", "12",
               "--steps", "1", "--warmup", "0", "--threads", "1", "--profile", "5", "--json", str(out)])
    assert rc == 0
    assert "asa-base / adaptive / channels-last: top 5 operators" in capsys.readouterr().out
    profile = json.loads(out.read_text())["profile"]
    assert set(profile) == {"asa-base/none/channels-last", "asa-base/adaptive/channels-last"}
    for ops in profile.values():
        assert len(ops) == 5 and all(o["self_ms"] > 0 and o["calls"] > 0 for o in ops)
        assert [o["self_ms"] for o in ops] == sorted((o["self_ms"] for o in ops), reverse=True)
    # only the attention network runs the attention's batched matmuls
    assert "aten::bmm" not in {o["op"] for o in profile["asa-base/none/channels-last"]}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--presets", "asa-huge"], "unknown preset(s) asa-huge"),
        (["--kinds", "sparse"], "unknown attention kind(s) sparse"),
        (["--layouts", "nhwc"], "unknown layout(s) nhwc"),
        (["--steps", "0"], "--steps must be >= 1"),
        (["--batch", "0"], "--batch must be >= 1"),
        (["--profile", "-1"], "--profile must be >= 0"),
        (["--json", "/nonexistent-dir/x.json"], "does not exist"),
    ],
)
def test_bad_options_are_clear_errors(argv, message, capsys):
    rc = main(["bench", "train", *argv])
    assert rc != 0
    err = capsys.readouterr().err
    assert err.startswith("sr bench: error:") and message in err


def test_the_bench_step_is_the_trainers_step_with_ema():
    import argparse

    import torch

    from benchmarks.train import Step

    args = argparse.Namespace(scale=2, amp=False, seed=0)
    step = Step("asa-small", "none", "contiguous", args, torch.device("cpu"))
    before = [p.clone() for p in step.trainer.ema.parameters()]
    hr = torch.rand(2, 3, 24, 24)
    loss = step(torch.nn.functional.avg_pool2d(hr, 2), hr)
    assert loss > 0 and step.trainer.step == 1
    # the EMA moved too: the trainer's step, not a re-written one without it
    assert any(not torch.equal(a, b) for a, b in zip(before, step.trainer.ema.parameters(), strict=True))
