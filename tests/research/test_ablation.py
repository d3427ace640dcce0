"""``python -m research.ablation``: two tiny runs at equal CPU budget in one table, side by side, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from research.ablation import main
from sr.train.config import load_config
from sr.train.loop import Trainer


def _images(folder, n, size, seed):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(folder / f"im{i}.png")
    return folder


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("abl")
    train, val = _images(root / "train", 2, 48, 0), _images(root / "valid", 1, 32, 1)
    for attention in ("none", "adaptive"):
        cfg = load_config(None, name=attention, preset="asa-small", attention=attention, scale=2,
                          train=[str(train)], val=[str(val)], patch=12, batch=2, steps=10_000,
                          cpu_hours=0.5 / 3600, warmup=1, val_every=10, ckpt_every=10, log_every=1,
                          out=str(root / "runs"), cache=str(root / "cache"), threads=1, device="cpu")
        Trainer(cfg).fit()
    return root


def test_the_table_reports_each_runs_cost_quality_and_speed(two_runs, tmp_path, capsys):
    out = tmp_path / "abl.json"
    runs = [str(two_runs / "runs" / n) for n in ("none", "adaptive")]
    assert main([*runs, "--hr", str(two_runs / "valid"), "--images", "1",
                 "--rounds", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| run | attention | params |" in text and "valid PSNR / SSIM" in text
    rows = json.loads(out.read_text())["runs"]
    assert [r["attention"] for r in rows] == ["none", "adaptive"]
    assert rows[0]["params"] < rows[1]["params"] and rows[0]["macs_g"] < rows[1]["macs_g"]
    for r in rows:
        # the CPU budget of 0.5 s stopped each run; its steps and seconds per step come from the checkpoint
        assert 0.5 <= r["cpu_hours"] * 3600 < 5 and 1 <= r["steps"] < 10_000
        assert r["cpu_s_per_step"] == pytest.approx(r["cpu_hours"] * 3600 / r["steps"])
        assert set(r["results"]) == {"valid"} and r["results"]["valid"]["psnr"] > 0 and r["mp_s"] > 0


def test_errors_name_the_problem(two_runs, tmp_path, capsys):
    assert main([str(tmp_path)]) != 0
    assert "no config.json" in capsys.readouterr().err
    run = str(two_runs / "runs" / "none")
    assert main([run, "--hr", str(tmp_path / "missing")]) != 0
    assert "no such folder" in capsys.readouterr().err


def test_cost_columns_and_untrained_kinds(two_runs, tmp_path, capsys):
    out = tmp_path / "cost.json"
    run = str(two_runs / "runs" / "none")
    args = ["--kinds", "window,linear", "--forward-size", "24", "--rounds", "2", "--json", str(out)]
    assert main([run, *args]) == 0
    text = capsys.readouterr().out
    assert "MACs/px" in text and "forward ms" in text
    assert "| window (untrained) | window |" in text and "| - | - | - | - |" in text
    data = json.loads(out.read_text())
    assert data["forward_size"] == 24
    rows = data["runs"]
    assert [r["attention"] for r in rows] == ["none", "window", "linear"]
    for r in rows:
        assert r["forward_ms"] > 0
        assert r["macs_per_px"] == pytest.approx(r["macs_g"] * 1e9 / (1280 * 720))
    # an attention block adds parameters and MACs to the same body
    assert rows[0]["params"] < rows[1]["params"] and rows[0]["macs_g"] < rows[2]["macs_g"]
    assert rows[1]["steps"] == 0 and rows[1]["results"] == {}


def test_unknown_kind_and_bad_size_are_refused(two_runs, capsys):
    run = str(two_runs / "runs" / "none")
    assert main([run, "--kinds", "nope"]) != 0
    assert "unknown attention kind 'nope'" in capsys.readouterr().err
    assert main([run, "--forward-size", "-1"]) != 0
    assert "--forward-size must be >= 0" in capsys.readouterr().err
