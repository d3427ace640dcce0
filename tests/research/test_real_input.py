"""``python -m research.peers --real-input``: every contender on clean and degraded sets, speed, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from research.peers import main
from research.real_input import LevelScores, blind_mean

PEERS = Path(__file__).resolve().parents[3] / "shared" / "peers"
needs_weights = pytest.mark.skipif(not (PEERS / "light_safmnpp.pth").is_file(), reason=f"{PEERS} absent")
NAMES = ["bicubic", "asa-base", "photo", "SAFMN++ light", "R-ESRGAN general", "R-ESRGAN blend 0.5"]


@pytest.fixture()
def hr_folder(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(2):
        # smooth + a little noise: the degradation chain and the models both have something to do
        ramp = np.linspace(40, 200, 64)[None, :, None] + np.linspace(0, 40, 48)[:, None, None]
        img = np.clip(ramp + rng.normal(0, 8, (48, 64, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(folder / f"im{i}.png")
    return folder


@needs_weights
def test_every_contender_scores_every_level_and_the_networks_are_timed(hr_folder, tmp_path, capsys):
    out = tmp_path / "real.json"
    assert main(["--real-input", "--hr", str(hr_folder), "--levels", "web,heavy", "--rounds", "1",
                 "--degrade-dir", str(tmp_path / "deg"), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "R-ESRGAN general (GAN)" in text and "| heavy |" in text
    report = json.loads(out.read_text())
    assert report["complete"] and [lv["level"] for lv in report["levels"]] == ["clean", "web", "heavy"]
    assert (tmp_path / "deg" / "photos-heavy-x4" / "manifest.json").is_file()  # sr degrade -o layout
    for lv in report["levels"]:
        assert list(lv["psnr"]) == NAMES and all(len(v) == 2 for v in lv["psnr"].values())
        assert all(0 < s <= 1 for v in lv["ssim"].values() for s in v)
    models = {m["name"]: m for m in report["models"]}
    assert [m["gan"] for m in report["models"]] == [False] * 4 + [True] * 2
    assert models["SAFMN++ light"]["params"] == 66_176 and models["R-ESRGAN general"]["params"] == 1_213_296
    timed = [n for n in NAMES[1:5]]
    assert all(models[n]["cpu_s_per_mp"] > 0 for n in timed)
    assert models["bicubic"]["cpu_s_per_mp"] is None and models["R-ESRGAN blend 0.5"]["cpu_s_per_mp"] is None
    assert report["blind_mean"]["photo"]["psnr"] is None   # only heavy of the three blind levels


def test_the_blind_mean_is_the_mean_of_the_three_level_means():
    levels = [LevelScores(lv, lv, ["a", "b"], psnr={"m": [v, v + 2]}, ssim={"m": [0.5, 0.7]})
              for lv, v in [("clean", 40.0), ("mild", 30.0), ("medium", 26.0), ("heavy", 22.0)]]
    assert blind_mean(levels, "m", "psnr") == pytest.approx(27.0)   # (31 + 27 + 23) / 3
    assert blind_mean(levels, "m", "ssim") == pytest.approx(0.6)
    assert blind_mean(levels[:3], "m", "psnr") is None


def test_errors_name_the_problem(hr_folder, tmp_path, capsys):
    assert main(["--real-input", "--hr", str(hr_folder), "--peers-dir", str(tmp_path)]) != 0
    assert "--peers-dir: missing " in capsys.readouterr().err
    assert main(["--real-input", "--hr", str(tmp_path / "nowhere")]) != 0
    assert "no such folder" in capsys.readouterr().err
    assert main(["--real-input", "--hr", str(hr_folder), "--levels", "soggy"]) != 0
    assert "unknown degradation level" in capsys.readouterr().err
    for strength in ("2", "-0.1"):  # refused whether or not the peers' weights are there
        for peers in (PEERS, tmp_path):
            assert main(["--real-input", "--hr", str(hr_folder), "--denoise-strength", strength,
                         "--peers-dir", str(peers)]) != 0
            assert f"--denoise-strength must be within 0..1, got {float(strength)}" in capsys.readouterr().err
