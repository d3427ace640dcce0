"""research.paired: the paired statistics, the per-block maps and a whole run on two tiny models."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image
from scipy.stats import spearmanr

from research import paired
from sr.models import build_model
from sr.weights import save_weights


def test_paired_stats_mean_se_and_wins():
    a, b = [30.0, 31.0, 32.0, 33.0], [30.5, 30.5, 32.5, 33.0]
    out = paired.paired_stats(a, b)
    d = [0.5, -0.5, 0.5, 0.0]
    assert out["diff"] == pytest.approx(np.mean(d))
    assert out["se"] == pytest.approx(np.std(d, ddof=1) / 2)
    assert out["wins"] == 2.5  # two wins, one tie
    with pytest.raises(ValueError):
        paired.paired_stats([1.0], [])


def test_spearman_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, 200).astype(float)  # many ties
    y = x + rng.normal(0, 2, 200)
    assert paired.spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert math.isnan(paired.spearman(np.ones(5), np.arange(5.0)))


def test_top_share():
    key = np.arange(10.0)
    gain = np.zeros(10)
    gain[-2:] = 1.0  # all the gain in the two highest keys: the top 20%
    assert paired.top_share(key, gain) == 1.0
    assert paired.top_share(key, np.ones(10)) == pytest.approx(0.2)


def test_repetition_finds_an_exact_repeat_and_not_noise():
    rng = np.random.default_rng(1)
    y = rng.normal(0, 1, (32, 64))
    y[0:8, 48:56] = y[0:8, 0:8] * 3 + 7  # the first block, repeated far away (gain and offset differ)
    rep = paired.repetition(y, 8)
    assert rep.shape == (4, 8)
    assert rep[0, 0] == pytest.approx(1.0) and rep[0, 6] == pytest.approx(1.0)
    assert rep[2, 3] < 0.9  # noise blocks have no repeat
    flat = paired.repetition(np.zeros((16, 16)), 8)
    assert (flat == 0).all()


def test_block_means_drop_the_ragged_edge():
    a = np.arange(100.0).reshape(10, 10)
    m = paired.block_means(a, 4)
    assert m.shape == (2, 2) and m[0, 0] == a[:4, :4].mean()


def test_run_pairs_two_models_on_clean_and_web(tmp_path, capsys):
    from skimage import data

    hr_dir = tmp_path / "photos"
    hr_dir.mkdir()
    Image.fromarray(data.astronaut()[:96, :128]).save(hr_dir / "astro.png")
    Image.fromarray(data.chelsea()[:96, :128]).save(hr_dir / "cat.png")
    conv = build_model("asa-small-x2", attention="none")
    attn = build_model("asa-small-x2")
    save_weights(conv, tmp_path / "conv-x2.safetensors", preset="asa-small")
    save_weights(attn, tmp_path / "attn-x2.safetensors", preset="asa-small")
    out = tmp_path / "paired.json"
    code = paired.main([
        "--a", str(tmp_path / "conv-x2.safetensors"), "--b", str(tmp_path / "attn-x2.safetensors"),
        "--hr", str(hr_dir), "--scale", "2", "--levels", "web,mild,medium,heavy,clean",
        "--degrade-dir", str(tmp_path / "degraded"), "--threads", "1", "--json", str(out),
    ])
    assert code == 0
    result = json.loads(out.read_text())
    tables = result["tables"]
    assert {"photos/web", "photos/clean", "photos/blind"} <= set(tables)
    web = tables["photos/web"]
    per_image = [r for r in result["images"] if r["level"] == "web"]
    assert len(per_image) == web["n"] == 2
    assert web["diff"] == pytest.approx(np.mean([r["psnr_b"] - r["psnr_a"] for r in per_image]))
    assert -1 <= web["where"]["gain_vs_budget"] <= 1  # the attention arm reports its budget map
    blind = tables["photos/blind"]
    levels = [np.mean([r["psnr_a"] for r in result["images"] if r["level"] == lv]) for lv in paired.BLIND]
    assert blind["psnr_a"] == pytest.approx(np.mean(levels))
    assert "B-A" in capsys.readouterr().out


def test_run_refuses_unknown_level_and_scale_mismatch(tmp_path, capsys):
    save_weights(build_model("asa-small-x2"), tmp_path / "m-x2.safetensors")
    args = ["--a", str(tmp_path / "m-x2.safetensors"), "--b", str(tmp_path / "m-x2.safetensors"),
            "--hr", str(tmp_path)]
    assert paired.main([*args, "--scale", "2", "--levels", "foggy"]) != 0
    assert "unknown level" in capsys.readouterr().err
    assert paired.main([*args, "--scale", "4"]) != 0
    assert "x4" in capsys.readouterr().err
