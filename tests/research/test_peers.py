"""``python -m research.peers``: IMDN's published sizes, ours vs IMDN side by side, and clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from research.imdn import IMDN
from research.peers import main
from sr.inference import UpscaleError, Upscaler
from sr.models import count_macs, count_params


@pytest.mark.parametrize(("scale", "params", "gmacs"),
                         [(2, 694_404, 158.8), (3, 703_059, 71.3), (4, 715_176, 40.9)])
def test_imdn_has_the_published_size(scale, params, gmacs):
    # the paper: 694K / 703K / 715K parameters, 158.8G / 71.5G / 40.9G mult-adds for a 1280x720 output
    net = IMDN(scale).eval()
    assert count_params(net) == params
    assert count_macs(net) / 1e9 == pytest.approx(gmacs, abs=0.1)
    with torch.inference_mode():
        assert net(torch.rand(1, 3, 9, 13)).shape == (1, 3, 9 * scale, 13 * scale)


def test_distillation_block_is_residual_and_keeps_shape():
    torch.manual_seed(0)
    net = IMDN(2).eval()
    block = net.blocks[0]
    for p in block.fuse.parameters():
        torch.nn.init.zeros_(p)  # a zero fusion leaves only the skip
    x = torch.rand(2, 64, 7, 5)
    with torch.inference_mode():
        assert torch.equal(block(x), x)


@pytest.fixture()
def hr_folder(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "hr"
    folder.mkdir()
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (36, 48, 3), dtype=np.uint8)).save(folder / f"im{i}.png")
    return folder


def test_ours_and_imdn_are_timed_per_scale(hr_folder, tmp_path, capsys):
    out = tmp_path / "peers.json"
    assert main(["--hr", str(hr_folder), "--scales", "2,4", "--rounds", "1",
                 "--json", str(out)]) == 0
    assert "| x2 | asa-base-x2 |" in capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [r["scale"] for r in rows] == [2, 4]
    assert [r["ours"] for r in rows] == ["asa-base-x2", "asa-base-x4"]
    for r in rows:
        assert r["images"] == 2 and r["ours_mp_s"] > 0 and r["imdn_mp_s"] > 0
        assert r["ratio"] == pytest.approx(r["ours_mp_s"] / r["imdn_mp_s"])
        assert r["ours_params"] < r["imdn_params"] and r["ours_macs_g"] < r["imdn_macs_g"]


@pytest.mark.cpu_bf16  # forces bf16 on the CPU
def test_both_networks_run_in_the_precision_asked_for(hr_folder, tmp_path, capsys):
    out = tmp_path / "peers.json"
    assert main(["--hr", str(hr_folder), "--scales", "2", "--rounds", "1", "--images", "1",
                 "--precision", "bf16", "--json", str(out)]) == 0
    assert "bf16)" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["precision"] == "bf16" and report["rows"][0]["ours_mp_s"] > 0


def test_errors_name_the_problem(hr_folder, tmp_path, capsys):
    assert main(["--hr", str(tmp_path / "missing")]) != 0
    assert "no such folder" in capsys.readouterr().err
    assert main(["--hr", str(hr_folder), "--scales", "5"]) != 0
    assert "among 2, 3, 4" in capsys.readouterr().err
    assert main(["--hr", str(hr_folder), "--model", "asa-base-x2", "--scales", "4"]) != 0
    assert "none of --scales" in capsys.readouterr().err
    assert main(["--hr", str(hr_folder), "--model", "no-such-model"]) != 0
    assert "unknown model" in capsys.readouterr().err


def test_the_engine_hands_out_its_network_per_scale():
    up = Upscaler("asa-base-x2", device="cpu")
    net = up.network(2)
    assert net.scale == 2 and not net.training
    with pytest.raises(UpscaleError, match="no x4 model"):
        up.network(4)
