"""``sr bench models``: a tiny random spandrel Compact model, one square input and a folder, bad options."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from sr.cli import main


@pytest.fixture
def compact_file(tmp_path, monkeypatch):
    pytest.importorskip("spandrel", reason="the models extra: pip install -e '.[models]'")
    from spandrel.architectures.Compact import Compact

    monkeypatch.setenv("SR_CACHE_DIR", str(tmp_path / "sr-cache"))  # the bf16 check's answers stay here
    torch.manual_seed(0)
    path = tmp_path / "compact-x2.pth"
    torch.save(Compact(num_in_ch=3, num_out_ch=3, num_feat=8, num_conv=2, upscale=2).state_dict(), path)
    return path


def test_square_input_times_direct_and_sr_and_matches_untiled(compact_file, tmp_path, capsys):
    out = tmp_path / "models.json"
    rc = main(["bench", "models", "--model", str(compact_file), "--size", "64", "--precision", "fp32",
               "--tiles", "0,52", "--ours", "", "--rounds", "2", "--threads", "1", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| direct fp32 | fp32 | - |" in text and "| sr fp32 untiled | fp32 | whole |" in text
    data = json.loads(out.read_text())
    rows = {r["arm"]: r for r in data["rows"]}
    assert set(rows) == {"direct fp32", "sr fp32 untiled", "sr fp32 tile 52"}
    assert data["output_mp"] == pytest.approx(128 * 128 / 1e6)
    assert data["scale"] == 2 and data["architecture"] == "RealESRGAN Compact" and data["threads"] == 1
    assert rows["sr fp32 untiled"]["max_abs_vs_direct"] < 1e-5  # the same call, sr's conversions around it
    assert rows["sr fp32 tile 52"]["tile"] == "52" and rows["sr fp32 tile 52"]["max_abs_vs_direct"] < 1e-3
    for r in rows.values():
        assert len(r["rounds"]) == 2 and r["seconds"] > 0
        assert r["mp_per_s"] > 0
    assert rows["direct fp32"]["speed_vs_direct"] is None
    assert rows["sr fp32 untiled"]["speed_vs_direct"] > 0


def test_folder_sums_the_images_and_times_sr_own_model(compact_file, tmp_path, capsys):
    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    Image.fromarray((rng.random((20, 28, 3)) * 255).astype(np.uint8)).save(folder / "a.png")
    Image.fromarray((rng.random((24, 16)) * 255).astype(np.uint8)).save(folder / "b.jpg")  # gray
    out = tmp_path / "folder.json"
    rc = main(["bench", "models", "--model", str(compact_file), "--images", str(folder), "--precision",
               "fp32", "--ours", "asa-base-x2", "--ours-precision", "fp32", "--rounds", "1", "--warmup", "0",
               "--threads", "1", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    rows = {r["arm"]: r for r in data["rows"]}
    assert set(rows) == {"direct fp32", "sr fp32 tile auto", "asa-base-x2 fp32"}
    assert data["output_mp"] == pytest.approx((20 * 28 + 24 * 16) * 4 / 1e6)
    assert rows["sr fp32 tile auto"]["max_abs_vs_direct"] < 1e-5
    own = rows["asa-base-x2 fp32"]
    assert own["precision"] == "fp32" and own["speed_vs_direct"] is None and own["max_abs_vs_direct"] is None
    assert all(len(r["rounds"]) == 1 for r in rows.values())


@pytest.mark.parametrize("argv, message", [
    (["--tiles", "big"], "--tiles: each setting is auto"),
    (["--precision", "fp16"], "--precision: give distinct names"),
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--ours", "asa-base-x4"], "has no x2 model"),
])
def test_bad_options_are_one_clear_line(compact_file, argv, message, capsys):
    rc = main(["bench", "models", "--model", str(compact_file), "--size", "16", "--precision", "fp32",
               "--rounds", "1", *argv])
    err = capsys.readouterr().err
    assert rc != 0 and message in err and "Traceback" not in err


def test_a_missing_model_file_is_one_line(tmp_path, capsys):
    rc = main(["bench", "models", "--model", str(tmp_path / "none.pth")])
    err = capsys.readouterr().err
    assert rc != 0 and "model file not found" in err and "Traceback" not in err
