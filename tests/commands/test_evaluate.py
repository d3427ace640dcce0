"""``sr eval``: tables, JSON/CSV, --save, --lr pairing, weights and every error path."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from sr.cli import main
from sr.evaluation import evaluate_folder, make_lr, model_upscaler, score_image
from sr.models import build_model
from sr.resize import modcrop
from sr.weights import load_weights, save_weights


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two small sets: 'alpha' (two RGB, one gray) and 'beta' laid out as beta/HR (one RGB)."""
    root = tmp_path_factory.mktemp("sets")
    a, b = root / "alpha", root / "beta" / "HR"
    a.mkdir()
    b.mkdir(parents=True)
    astro, cat = data.astronaut(), data.chelsea()
    Image.fromarray(astro[40:91, 200:249]).save(a / "astro.png")  # 51x49: modcrop drops a row/column
    Image.fromarray(cat[60:108, 150:202]).save(a / "cat.png")
    Image.fromarray(data.camera()[100:148, 200:250]).save(a / "cam.png")  # gray
    Image.fromarray(astro[300:348, 100:160]).save(b / "face.png")
    (a / "notes.txt").write_text("not an image")
    (root / "empty").mkdir()
    (root / "corrupt").mkdir()
    (root / "corrupt" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (root / "tiny").mkdir()
    Image.fromarray(np.zeros((14, 30, 3), np.uint8)).save(root / "tiny" / "small.png")
    return {"root": root, "alpha": a, "beta": b}


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("w") / "tiny-x2.safetensors"
    return save_weights(build_model("asa-small-x2"), path, name="tiny-x2", steps="7")


def _eval(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(["eval", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _rows(out: str) -> dict[str, tuple[float, float]]:
    """'  name  psnr  ssim' lines of the table -> {name: (psnr, ssim)} (last one wins for 'mean')."""
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] not in ("image", "set"):
            rows[parts[0]] = (float(parts[1]), float(parts[2]))
    return rows


def test_bicubic_table_matches_library(capsys: pytest.CaptureFixture, sets: dict[str, Path]) -> None:
    code, out, err = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2")
    assert code == 0 and err == ""
    rows = _rows(out)
    expected = evaluate_folder(sets["alpha"], 2, None)
    assert [s.name for s in expected] == ["astro", "cam", "cat"]
    for s in expected:
        assert rows[s.name] == (round(s.psnr, 4), round(s.ssim, 4))
    assert rows["mean"][0] == pytest.approx(np.mean([s.psnr for s in expected]), abs=1e-4)
    assert "alpha (3 images" in out


def test_several_sets_json_and_csv(
    capsys: pytest.CaptureFixture, sets: dict[str, Path], tmp_path: Path
) -> None:
    js, cs = tmp_path / "out" / "r.json", tmp_path / "r.csv"
    code, out, _ = _eval(
        capsys, "--hr", str(sets["alpha"]), str(sets["beta"]), "--scale", "3", "--channel", "rgb",
        "--json", str(js), "--csv", str(cs),
    )
    assert code == 0
    doc = json.loads(js.read_text())
    assert doc["scale"] == 3 and doc["channel"] == "rgb" and doc["model"] == "bicubic"
    assert [s["name"] for s in doc["sets"]] == ["alpha", "beta"]  # beta/HR is named after its parent
    for s in doc["sets"]:
        hr_dir = sets["alpha"] if s["name"] == "alpha" else sets["beta"]
        ref = evaluate_folder(hr_dir, 3, None, channel="rgb")
        assert [r["image"] for r in s["per_image"]] == [r.name for r in ref]
        assert [r["psnr"] for r in s["per_image"]] == pytest.approx([r.psnr for r in ref], abs=1e-12)
        assert s["psnr"] == pytest.approx(np.mean([r.psnr for r in ref]), abs=1e-12)
        assert s["images"] == len(ref)
    with cs.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["set"], r["kind"]) for r in rows] == [
        ("alpha", "image"), ("alpha", "image"), ("alpha", "image"), ("alpha", "mean"),
        ("beta", "image"), ("beta", "mean"),
    ]
    assert float(rows[3]["psnr"]) == pytest.approx(doc["sets"][0]["psnr"], abs=1e-4)
    summary = out[out.rindex(" set "):]
    assert "alpha" in summary and "beta" in summary
    assert sorted(p.name for p in js.parent.iterdir()) == ["r.json"]  # no temp file left behind


def test_model_weights_and_save(capsys: pytest.CaptureFixture, sets: dict[str, Path], weights: Path,
                                tmp_path: Path) -> None:
    save = tmp_path / "sr"
    code, out, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", str(weights),
                         "--save", str(save), "--device", "cpu")
    assert code == 0
    assert "tiny-x2" in out and f"{sum(p.numel() for p in build_model('asa-small-x2').parameters()):,}" in out
    model, _ = load_weights(weights)
    up = model_upscaler(model)
    rows = _rows(out)
    for path in sorted(sets["alpha"].glob("*.png")):
        hr = np.asarray(Image.open(path))
        p, s, sr = score_image(hr, up, 2)
        assert rows[path.stem] == (round(p, 4), round(s, 4))
        saved = np.asarray(Image.open(save / "alpha" / f"{path.stem}.png"))
        np.testing.assert_array_equal(saved, sr)
    assert np.asarray(Image.open(save / "alpha" / "cam.png")).ndim == 2  # gray scored and saved gray


def test_tta_scores_the_self_ensemble(capsys: pytest.CaptureFixture, sets: dict[str, Path],
                                      weights: Path) -> None:
    code, out, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", str(weights),
                         "--device", "cpu", "--tta")
    assert code == 0 and "x8 self-ensemble" in out
    model, _ = load_weights(weights)
    rows = _rows(out)
    for path in sorted(sets["alpha"].glob("*.png")):
        hr = np.asarray(Image.open(path))
        p, s, _ = score_image(hr, model_upscaler(model, tta=True), 2)
        assert rows[path.stem] == (round(p, 4), round(s, 4))
        assert p != score_image(hr, model_upscaler(model), 2)[0]


@pytest.mark.cpu_bf16  # forces bf16 on the CPU
def test_precision_bf16_scores_the_model_run_in_bf16(capsys: pytest.CaptureFixture, sets: dict[str, Path],
                                                    weights: Path) -> None:
    import torch

    code, out, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", str(weights),
                         "--device", "cpu", "--precision", "bf16")
    assert code == 0 and ", bf16)" in out
    model, _ = load_weights(weights)
    rows = _rows(out)
    for path in sorted(sets["alpha"].glob("*.png")):
        hr = np.asarray(Image.open(path))
        p, s, _ = score_image(hr, model_upscaler(model.to(torch.bfloat16), dtype=torch.bfloat16), 2)
        assert rows[path.stem] == (round(p, 4), round(s, 4))
        assert p != score_image(hr, model_upscaler(model.float()), 2)[0]  # bf16 did run
    with pytest.raises(SystemExit) as exit_info:
        _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", str(weights), "--precision", "x")
    assert exit_info.value.code == 2


def test_budget_override_changes_the_attention_spent(capsys: pytest.CaptureFixture, sets: dict[str, Path],
                                                     weights: Path) -> None:
    def mean_psnr(*extra: str) -> float:
        code, out, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", str(weights),
                             "--device", "cpu", *extra)
        assert code == 0
        return _rows(out)["mean"][0]

    trained = mean_psnr()
    assert mean_psnr("--budget", "4") == trained  # the preset's own budget: nothing changes
    assert mean_psnr("--budget", "0") != trained  # attention skipped everywhere


def test_bicubic_save_is_viewable_rgb(
    capsys: pytest.CaptureFixture, sets: dict[str, Path], tmp_path: Path
) -> None:
    code, _, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--save", str(tmp_path))
    assert code == 0
    astro = np.asarray(Image.open(sets["alpha"] / "astro.png"))
    saved = np.asarray(Image.open(tmp_path / "alpha" / "astro.png"))
    assert saved.shape == (50, 48, 3)
    # the Y-only baseline is scored; the saved file is the RGB bicubic of the same LR
    from sr.resize import imresize

    np.testing.assert_array_equal(saved, imresize(make_lr(modcrop(astro, 2), 2), 2))


def test_lr_folder_pairs_by_stem(capsys: pytest.CaptureFixture, sets: dict[str, Path], weights: Path,
                                 tmp_path: Path) -> None:
    lr_dir = tmp_path / "lr"
    lr_dir.mkdir()
    names = {"astro": "astro_x2.png", "cat": "cat_LRBI_x2.png", "cam": "camx2.png"}
    for stem, name in names.items():
        hr = np.asarray(Image.open(sets["alpha"] / f"{stem}.png"))
        Image.fromarray(make_lr(modcrop(hr, 2), 2)).save(lr_dir / name)
    common = ["--hr", str(sets["alpha"]), "--scale", "2", "--model", str(weights)]
    _, with_lr, _ = _eval(capsys, *common, "--lr", str(lr_dir))
    _, without, _ = _eval(capsys, *common)
    assert f"LR from {lr_dir}" in with_lr
    assert _rows(with_lr) == _rows(without)  # the same LR images, so the same numbers

    # a wrong-sized LR is caught before anything is scored
    Image.fromarray(np.zeros((10, 10, 3), np.uint8)).save(lr_dir / "camx2.png")
    code, out, err = _eval(capsys, *common, "--lr", str(lr_dir))
    assert code == 2 and "cam.png: HR 50x48" in err and "2 x LR 10x10" in err and out == ""
    (lr_dir / "camx2.png").unlink()
    code, _, err = _eval(capsys, *common, "--lr", str(lr_dir))
    assert code == 2 and "cam.png: no LR image" in err
    code, _, err = _eval(capsys, *common, "--lr", str(lr_dir), str(lr_dir))
    assert code == 2 and "one --lr folder per --hr folder" in err


def test_gray_as_rgb_changes_gray_scores(capsys: pytest.CaptureFixture, sets: dict[str, Path]) -> None:
    _, native, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2")
    _, as_rgb, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--gray-as-rgb")
    a, b = _rows(native), _rows(as_rgb)
    assert a["cam"] != b["cam"]
    assert a["astro"] == b["astro"] and a["cat"] == b["cat"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hr", "{root}/missing", "--scale", "2"], "HR folder not found"),
        (["--hr", "{root}/empty", "--scale", "2"], "no images in HR folder"),
        (["--hr", "{root}/alpha/astro.png", "--scale", "2"], "not a folder"),
        (["--hr", "{root}/corrupt", "--scale", "2"], "broken.png: not a readable image"),
        (["--hr", "{root}/tiny", "--scale", "2"], "small.png: 30x14 is too small to score at x2"),
        (["--hr", "{root}/alpha", "--scale", "1"], "--scale must be between 2 and 8"),
        (["--hr", "{root}/alpha", "--scale", "5", "--model", "{w}"], "x2, x3 and x4 only"),
        (["--hr", "{root}/alpha", "--scale", "3", "--model", "{w}"], "is a x2 model but --scale is 3"),
        (["--hr", "{root}/alpha", "--scale", "2", "--model", "no-such-model"], "unknown model 'no-such"),
        (["--hr", "{root}/alpha", "--scale", "2", "--model", "{root}/bad.safetensors"], "not a readable"),
        (["--hr", "{root}/alpha", "--scale", "2", "--json", "{root}"], "is a folder"),
        (["--hr", "{root}/alpha", "--scale", "2", "--device", "nonsense"], "unknown device"),
        (["--hr", "{root}/alpha", "--scale", "2", "--tta"], "need a model, not bicubic"),
        (["--hr", "{root}/alpha", "--scale", "2", "--model", "{w}", "--budget", "9"], "between 0 and"),
        (["--hr", "{root}/alpha", "--scale", "2", "--degrade", "extreme"], "degradation level 'extreme'"),
        (["--hr", "{root}/alpha", "--scale", "2", "--degrade", "web", "--lr", "{root}"], "exclude each"),
        (["--hr", "{root}/alpha", "--scale", "2", "--degrade-seed", "3"], "go with --degrade"),
        (["--hr", "{root}/alpha", "--scale", "2", "--degrade-dir", "{root}"], "go with --degrade"),
        (["--hr", "{root}/missing", "--scale", "2", "--degrade", "web"], "HR folder not found"),
        (["--hr", "{root}/alpha", "--scale", "2", "--degrade", "web", "--degrade-dir", "{w}"], "a folder"),
    ],
)
def test_errors_exit_nonzero_with_message(capsys: pytest.CaptureFixture, sets: dict[str, Path], weights: Path,
                                          argv: list[str], message: str) -> None:
    root = sets["root"]
    (root / "bad.safetensors").write_bytes(b"\x00garbage" * 10)
    argv = [a.format(root=root, w=weights) for a in argv]
    code, out, err = _eval(capsys, *argv)
    assert code == 2
    assert err.startswith("sr eval: error: ") and message in err
    assert out == ""  # nothing scored, nothing printed


def test_errors_as_a_process(sets: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "corrupt.safetensors"
    bad.write_bytes(b"{}" * 50)
    js = tmp_path / "never.json"
    proc = subprocess.run(
        [sys.executable, "-m", "sr", "eval", "--hr", str(sets["alpha"]), "--scale", "2", "--model", str(bad),
         "--json", str(js)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "sr eval: error:" in proc.stderr and "corrupt.safetensors" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not js.exists()


def test_a_family_name_takes_the_model_of_the_scale(capsys: pytest.CaptureFixture, sets: dict[str, Path],
                                                     weights: Path) -> None:
    folder = ("--weights-dir", str(weights.parent))  # holds tiny-x2 only
    code, out, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", "tiny", "-q", *folder)
    assert code == 0 and "model: tiny-x2 (" in out
    code, _, err = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "3", "--model", "tiny", *folder)
    assert code == 2 and err.strip() == "sr eval: error: tiny has no x3 model (it has x2)"


def test_the_model_is_named_by_its_name_not_its_training_run(
    capsys: pytest.CaptureFixture, sets: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shipped weights keep their run's name in the metadata (asa-base-x2 was trained as x2-extra):
    the report names the model the user asked for (here in a folder named by SR_WEIGHTS_DIR)."""
    save_weights(build_model("asa-small-x2"), tmp_path / "tiny-x2.safetensors", name="x2-extra", steps="7")
    monkeypatch.setenv("SR_WEIGHTS_DIR", str(tmp_path))
    code, out, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", "tiny-x2", "-q")
    assert code == 0 and "model: tiny-x2 (" in out and "x2-extra" not in out, out


def test_a_missing_weights_folder_is_an_error_before_any_model_is_looked_up(
    capsys: pytest.CaptureFixture, sets: dict[str, Path], tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere"
    code, out, err = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", "tiny",
                           "--weights-dir", str(missing))
    assert (code, err) == (2, f"sr eval: error: weights folder not found: {missing}\n")
    assert "model:" not in out
    code, _, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "-q", "--weights-dir",
                       str(missing))
    assert code == 0  # bicubic looks no model up


def test_progress_bar_on_a_terminal_only(sets: dict[str, Path]) -> None:
    import fcntl
    import pty
    import struct
    import termios

    argv = [sys.executable, "-m", "sr", "eval", "--hr", str(sets["alpha"]), "--scale", "2", "-q"]
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and piped.stderr == ""  # not a terminal: no bar
    main_fd, tty_fd = pty.openpty()
    fcntl.ioctl(tty_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new pty is 0 wide
    try:
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=tty_fd, timeout=120)
        os.close(tty_fd)
        shown = b""
        while True:
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main_fd)
    assert proc.returncode == 0
    assert b"/3 [" in shown and b"img/s" in shown  # a bar over the set's 3 images (cleared at the end)


# -- --degrade: seeded degraded sets built (or reused) and scored against the clean HR ----------------


def _degrade_eval(capsys: pytest.CaptureFixture, sets: dict[str, Path], cache: Path, *argv: str):
    return _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--degrade-dir", str(cache), *argv)


def test_degrade_scores_the_degraded_sets_against_the_clean_hr(
    capsys: pytest.CaptureFixture, sets: dict[str, Path], tmp_path: Path
) -> None:
    from sr.evaluation import plan_sets, score_pairs
    from sr.evaluation.degraded import DEFAULT_SEED

    cache, js, cs = tmp_path / "degraded", tmp_path / "r.json", tmp_path / "r.csv"
    code, out, err = _degrade_eval(capsys, sets, cache, "--degrade", "web,mild", "--json", str(js),
                                   "--csv", str(cs))
    assert code == 0 and err == ""
    assert sorted(p.name for p in cache.iterdir()) == ["alpha-mild-x2", "alpha-web-x2"]
    assert f"wrote {cache / 'alpha-web-x2'}: 3 images" in out
    assert f"alpha-mild-x2 (3 images, LR from {cache / 'alpha-mild-x2'})" in out
    doc = json.loads(js.read_text())
    assert doc["degrade"] == {"levels": ["web", "mild"], "seed": DEFAULT_SEED, "dir": str(cache)}
    levels = [(s["name"], s["level"]) for s in doc["sets"]]
    assert levels == [("alpha-web-x2", "web"), ("alpha-mild-x2", "mild")]
    assert doc["blind_means"] == []  # one blind level only: no blind mean
    summary = out[out.rindex(" set "):]
    assert "blind" not in summary
    for entry in doc["sets"]:
        (plan,) = plan_sets([str(sets["alpha"])], [entry["lr"]], 2)
        expected = [(h.stem, p, s) for h, _, p, s, _ in score_pairs(plan, None, 2)]
        assert [(r["image"], r["psnr"], r["ssim"]) for r in entry["per_image"]] == expected
        assert f"  {entry['name']}  " in summary and f"{entry['psnr']:.4f}" in summary
    clean = _rows(_eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2")[1])
    assert clean["mean"][0] > doc["sets"][1]["psnr"]  # mild LR is harder than the bicubic LR
    with cs.open() as f:
        kinds = [(r["set"], r["kind"]) for r in csv.DictReader(f)]
    assert kinds.count(("alpha-web-x2", "mean")) == 1 and len(kinds) == 8

    # again: the sets are kept (not rebuilt) and score the same
    stamps = {p: p.stat().st_mtime_ns for p in cache.rglob("*")}
    code, again, _ = _degrade_eval(capsys, sets, cache, "--degrade", "web,mild")
    assert code == 0 and f"kept {cache / 'alpha-web-x2'}" in again
    assert again[again.rindex(" set "):] == summary
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*")} == stamps
    # quiet: the table only
    code, quiet, _ = _degrade_eval(capsys, sets, cache, "--degrade", "web,mild", "-q")
    assert code == 0 and "kept" not in quiet and "astro" not in quiet and "alpha-mild-x2" in quiet


def test_degrade_blind_mean_row_per_hr_folder(
    capsys: pytest.CaptureFixture, sets: dict[str, Path], tmp_path: Path
) -> None:
    cache, js, cs = tmp_path / "degraded", tmp_path / "r.json", tmp_path / "r.csv"
    code, out, _ = _eval(capsys, "--hr", str(sets["alpha"]), str(sets["beta"]), "--scale", "2", "--degrade",
                         "all", "--degrade-dir", str(cache), "--json", str(js), "--csv", str(cs), "-q")
    assert code == 0
    summary = [line.split() for line in out[out.rindex(" set "):].splitlines()[1:] if line.strip()]
    names = [row[0] for row in summary if len(row) == 4]
    assert names == [f"{folder}-{kind}-x2" for folder in ("alpha", "beta")
                     for kind in ("web", "mild", "medium", "heavy", "chain", "blind-mean")]
    doc = json.loads(js.read_text())
    means = {s["name"]: (s["psnr"], s["ssim"]) for s in doc["sets"]}
    assert [b["name"] for b in doc["blind_means"]] == ["alpha-blind-mean-x2", "beta-blind-mean-x2"]
    for b in doc["blind_means"]:
        folder = b["name"].split("-")[0]
        assert b["levels"] == ["mild", "medium", "heavy"] and b["images"] == (3 if folder == "alpha" else 1)
        parts = [means[f"{folder}-{lv}-x2"] for lv in b["levels"]]
        assert b["psnr"] == pytest.approx(np.mean([p for p, _ in parts]), abs=1e-12)
        assert b["ssim"] == pytest.approx(np.mean([s for _, s in parts]), abs=1e-12)
        row = next(r for r in summary if r[0] == b["name"])
        assert float(row[2]) == round(b["psnr"], 4)
        # harder than web, easier than heavy
        assert means[f"{folder}-web-x2"][0] > b["psnr"] > means[f"{folder}-heavy-x2"][0]
    with cs.open() as f:
        blind = [r for r in csv.DictReader(f) if r["kind"] == "blind-mean"]
    assert [r["set"] for r in blind] == ["alpha-blind-mean-x2", "beta-blind-mean-x2"]
    # two of the three blind levels still make a blind mean, of those two
    code, out, _ = _degrade_eval(capsys, sets, cache, "--degrade", "mild,heavy", "-q")
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("alpha-blind-mean-x2"))
    assert float(row[2]) == pytest.approx(np.mean([means["alpha-mild-x2"][0], means["alpha-heavy-x2"][0]]),
                                          abs=1e-4)
    assert "blind mean = the mean of" in out


def test_degrade_with_a_model(capsys: pytest.CaptureFixture, sets: dict[str, Path], weights: Path,
                              tmp_path: Path) -> None:
    from sr.evaluation import score_lr

    cache = tmp_path / "degraded"
    code, out, _ = _degrade_eval(capsys, sets, cache, "--degrade", "medium", "--model", str(weights),
                                 "--device", "cpu")
    assert code == 0 and "tiny-x2" in out
    model, _ = load_weights(weights)
    rows = _rows(out)
    for path in sorted(sets["alpha"].glob("*.png")):
        hr = np.asarray(Image.open(path))
        lr = np.asarray(Image.open(cache / "alpha-medium-x2" / f"{path.stem}_x2.jpg"))
        p, s, _ = score_lr(hr, lr, model_upscaler(model), 2)
        assert rows[path.stem] == (round(p, 4), round(s, 4))


def test_degrade_default_dir_and_seed(capsys: pytest.CaptureFixture, sets: dict[str, Path], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = _eval(capsys, "--hr", str(sets["beta"]), "--scale", "3", "--degrade", "heavy")
    assert code == 0 and "(seed 2026, sets in runs/degraded)" in out
    assert (tmp_path / "runs" / "degraded" / "beta-heavy-x3" / "manifest.json").is_file()
    # another seed is another set: not silently mixed with the one there
    code, out, err = _eval(capsys, "--hr", str(sets["beta"]), "--scale", "3", "--degrade", "heavy",
                           "--degrade-seed", "5")
    assert code == 2 and out == "" and "holds another degraded set" in err
    code, out, _ = _eval(capsys, "--hr", str(sets["beta"]), "--scale", "3", "--degrade", "heavy",
                         "--degrade-seed", "5", "--degrade-dir", "seed5")
    assert code == 0 and (tmp_path / "seed5" / "beta-heavy-x3").is_dir()


# -- --metrics: perceptual columns (the real metrics are tests/evaluation/test_perceptual.py's) ---------


def test_default_output_is_the_psnr_ssim_table_byte_for_byte(
    capsys: pytest.CaptureFixture, sets: dict[str, Path], tmp_path: Path
) -> None:
    """Without --metrics (or with only psnr,ssim) the table and files are what they were before."""
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    code, out, err = _eval(capsys, "--hr", str(sets["beta"]), "--scale", "2", "--json", str(js), "--csv",
                           str(cs))
    assert code == 0 and err == ""
    (face,) = evaluate_folder(sets["beta"], 2, None)
    p, s = f"{face.psnr:>8.4f}", f"{face.ssim:>7.4f}"
    assert out == (
        "model: bicubic (MATLAB imresize)   scale: x2   scored on: Y, 2-pixel border cropped\n"
        "\n"
        "beta (1 images, LR = bicubic of HR)\n"
        "  image             PSNR     SSIM\n"
        f"  face          {p}  {s}\n"
        f"  mean          {p}  {s}\n"
        "\n"
        "  set           images      PSNR     SSIM\n"
        f"  beta               1  {p}  {s}\n"
    )
    doc = json.loads(js.read_text())
    assert list(doc) == ["model", "description", "scale", "channel", "gray_as_rgb", "crop_border", "seconds",
                         "sets"]
    assert list(doc["sets"][0]) == ["name", "hr", "lr", "images", "psnr", "ssim", "seconds", "per_image"]
    assert list(doc["sets"][0]["per_image"][0]) == ["image", "psnr", "ssim"]
    assert cs.read_text() == (f"set,kind,image,psnr,ssim\nbeta,image,face,{face.psnr:.4f},{face.ssim:.4f}\n"
                              f"beta,mean,,{face.psnr:.4f},{face.ssim:.4f}\n")
    csv_before, json_before = cs.read_text(), {k: v for k, v in doc.items() if k != "seconds"}
    code, same, _ = _eval(capsys, "--hr", str(sets["beta"]), "--scale", "2", "--json", str(js), "--csv",
                          str(cs), "--metrics", "PSNR,ssim")
    assert code == 0 and same == out and cs.read_text() == csv_before
    doc = json.loads(js.read_text())
    for s_ in doc["sets"]:
        s_.pop("seconds")
    for s_ in json_before["sets"]:
        s_.pop("seconds")
    assert {k: v for k, v in doc.items() if k != "seconds"} == json_before


@pytest.mark.parametrize(
    "metrics, message",
    [("psnr,lpips", "--metrics: unknown metric(s) lpips; choose from psnr, ssim, haarpsi, cvvdp, cvvdp-zoom, "
                    "brisque, lattice"),
     (",", "--metrics: no metric named; give e.g. psnr,ssim,haarpsi,cvvdp,brisque,lattice")],
)
def test_metrics_unknown_or_empty(capsys: pytest.CaptureFixture, sets: dict[str, Path], metrics: str,
                                  message: str) -> None:
    code, out, err = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--metrics", metrics)
    assert code == 2 and out == "" and err.strip() == f"sr eval: error: {message}"


@pytest.mark.parametrize("metric, module", [("haarpsi", "piq"), ("cvvdp", "pycvvdp"), ("brisque", "cv2")])
def test_metrics_missing_package_fails_before_the_model_loads(
    capsys: pytest.CaptureFixture, sets: dict[str, Path], weights: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, metric: str, module: str,
) -> None:
    import sr.evaluation

    called = []
    monkeypatch.setattr(sr.evaluation, "load_model", lambda *a, **k: called.append("load_model"))
    monkeypatch.setattr(sr.evaluation, "plan_sets", lambda *a, **k: called.append("plan_sets"))
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: importing it raises ImportError
    js = tmp_path / "never.json"
    code, out, err = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", str(weights),
                           "--metrics", f"psnr,ssim,{metric}", "--json", str(js))
    assert code == 2 and out == "" and called == [] and not js.exists()
    assert err.startswith("sr eval: error: --metrics: the ") and "cannot be imported" in err
    assert "pip install '.[perceptual]'" in err and err.count("\n") == 1


def test_metrics_missing_package_as_a_process(sets: dict[str, Path]) -> None:
    argv = ["eval", "--hr", str(sets["alpha"]), "--scale", "2", "--metrics", "cvvdp"]
    script = f"import sys; sys.modules['pycvvdp'] = None; from sr.cli import main; sys.exit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "sr eval: error: --metrics: the 'cvvdp' metric package cannot be imported" in proc.stderr
    assert "[perceptual]" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture
def fake_metrics(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """haarpsi and brisque replaced by simple stand-ins (the extra is not needed) that record what they
    were given: the plumbing of --metrics tested where the real packages are not installed."""
    from sr.evaluation import perceptual

    seen: dict[str, list] = {"haarpsi": [], "brisque": []}

    def haarpsi(hr: np.ndarray, sr: np.ndarray) -> float:
        seen["haarpsi"].append((hr.copy(), sr.copy()))
        return float(np.mean(np.abs(perceptual._rgb(hr).astype(np.float64) - perceptual._rgb(sr))))

    def brisque(hr: np.ndarray, sr: np.ndarray) -> float:
        seen["brisque"].append((hr.copy(), sr.copy()))
        return float(sr.mean())

    monkeypatch.setitem(perceptual.METRICS, "haarpsi",
                        perceptual.Metric("haarpsi", "piq", True, True, haarpsi))
    monkeypatch.setitem(perceptual.METRICS, "brisque",
                        perceptual.Metric("brisque", "brisque", False, False, brisque))
    monkeypatch.setattr(perceptual, "check_available", lambda name: None)
    return seen


def _table(out: str, n: int) -> dict[str, list[float]]:
    """Lines of 'name' and n numbers -> {name: numbers} (last one wins for 'mean')."""
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == n + 1 and parts[0] not in ("image", "set"):
            rows[parts[0]] = [float(x) for x in parts[1:]]
    return rows


def test_metrics_columns_in_table_json_and_csv(capsys: pytest.CaptureFixture, sets: dict[str, Path],
                                               tmp_path: Path, fake_metrics: dict[str, list]) -> None:
    from sr.evaluation import load_hr
    from sr.resize import imresize

    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    code, out, err = _eval(capsys, "--hr", str(sets["alpha"]), str(sets["beta"]), "--scale", "2",
                           "--metrics", "psnr,ssim,brisque,haarpsi", "--json", str(js), "--csv", str(cs))
    assert code == 0 and err == ""
    assert "perceptual, on RGB with the same crop: BRISQUE (SR alone; lower = more natural), HaarPSI" in out
    assert "  image             PSNR     SSIM   BRISQUE   HaarPSI\n" in out
    assert "  set           images      PSNR     SSIM   BRISQUE   HaarPSI\n" in out
    # what the metrics saw: HR modcropped, both cut by the 2-pixel border, the RGB bicubic of the LR
    # (the Y-only baseline has no colour), gray images as they are scored
    names = ["astro", "cam", "cat", "face"]
    assert len(fake_metrics["haarpsi"]) == len(fake_metrics["brisque"]) == 4
    expected: dict[str, tuple[float, float]] = {}
    for name, (hr_c, sr_c) in zip(names, fake_metrics["haarpsi"], strict=True):
        folder = sets["beta"] if name == "face" else sets["alpha"]
        hr = load_hr(folder / f"{name}.png")
        m = modcrop(hr, 2)
        np.testing.assert_array_equal(hr_c, m[2:-2, 2:-2])
        if hr.ndim == 3:
            np.testing.assert_array_equal(sr_c, imresize(make_lr(m, 2), 2)[2:-2, 2:-2])
        else:
            assert sr_c.shape == m[2:-2, 2:-2].shape  # gray in, gray scored
        expected[name] = (float(sr_c.mean()),
                          float(np.mean(np.abs(hr_c.astype(np.float64) - sr_c))))
    assert fake_metrics["haarpsi"][0][0].shape == (46, 44, 3)  # astro: 51x49 -> 50x48 -> 46x44
    rows = _table(out, 4)
    for name in names:
        assert rows[name][2:] == [round(v, 4) for v in expected[name]]
        assert rows[name][:2] == [round(v, 4) for v in _rows_psnr_ssim(name, sets)]
    doc = json.loads(js.read_text())
    assert doc["metrics"] == ["psnr", "ssim", "brisque", "haarpsi"] and "cvvdp_display" not in doc
    alpha = doc["sets"][0]
    assert list(alpha)[3:8] == ["images", "psnr", "ssim", "brisque", "haarpsi"]
    assert [r["brisque"] for r in alpha["per_image"]] == pytest.approx([expected[n][0] for n in names[:3]])
    assert alpha["haarpsi"] == pytest.approx(np.mean([expected[n][1] for n in names[:3]]))
    summary = _table(out, 5)  # images, PSNR, SSIM and the two
    assert summary["alpha"] == [3, round(alpha["psnr"], 4), round(alpha["ssim"], 4),
                                round(alpha["brisque"], 4), round(alpha["haarpsi"], 4)]
    with cs.open() as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == ["set", "kind", "image", "psnr", "ssim", "brisque", "haarpsi"]
    assert table[3]["kind"] == "mean"
    assert float(table[3]["haarpsi"]) == pytest.approx(alpha["haarpsi"], abs=1e-4)
    # -q: the summary alone, with the columns
    code, quiet, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--metrics", "haarpsi", "-q")
    assert code == 0 and "astro" not in quiet and _table(quiet, 4)["alpha"][3] == round(alpha["haarpsi"], 4)


def _rows_psnr_ssim(name: str, sets: dict[str, Path]) -> tuple[float, float]:
    folder = sets["beta"] if name == "face" else sets["alpha"]
    (score,) = [s for s in evaluate_folder(folder, 2, None) if s.name == name]
    return score.psnr, score.ssim


def test_metrics_see_what_save_writes_with_a_model(capsys: pytest.CaptureFixture, sets: dict[str, Path],
                                                   weights: Path, tmp_path: Path,
                                                   fake_metrics: dict[str, list]) -> None:
    code, _, _ = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--model", str(weights),
                       "--device", "cpu", "--metrics", "brisque", "--save", str(tmp_path), "-q")
    assert code == 0 and fake_metrics["haarpsi"] == []
    for name, (_, sr_c) in zip(["astro", "cam", "cat"], fake_metrics["brisque"], strict=True):
        saved = np.asarray(Image.open(tmp_path / "alpha" / f"{name}.png"))
        np.testing.assert_array_equal(sr_c, saved[2:-2, 2:-2])


def test_metrics_in_blind_means(capsys: pytest.CaptureFixture, sets: dict[str, Path], tmp_path: Path,
                                fake_metrics: dict[str, list]) -> None:
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    code, out, _ = _degrade_eval(capsys, sets, tmp_path / "deg", "--degrade", "mild,heavy", "--metrics",
                                 "brisque", "--json", str(js), "--csv", str(cs), "-q")
    assert code == 0
    doc = json.loads(js.read_text())
    means = {s["name"]: s["brisque"] for s in doc["sets"]}
    (blind,) = doc["blind_means"]
    assert blind["brisque"] == pytest.approx((means["alpha-mild-x2"] + means["alpha-heavy-x2"]) / 2)
    row = _table(out, 4)["alpha-blind-mean-x2"]
    assert row[3] == round(blind["brisque"], 4)
    with cs.open() as f:
        (b,) = [r for r in csv.DictReader(f) if r["kind"] == "blind-mean"]
    assert float(b["brisque"]) == pytest.approx(blind["brisque"], abs=1e-4)


def test_metrics_haarpsi_needs_16_pixels_checked_up_front(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                          fake_metrics: dict[str, list]) -> None:
    small = tmp_path / "small"
    small.mkdir()
    Image.fromarray(data.astronaut()[:19, :40]).save(small / "strip.png")  # 18 x 40 -> 14 after the crop
    assert _eval(capsys, "--hr", str(small), "--scale", "2", "--metrics", "brisque", "-q")[0] == 0
    code, out, err = _eval(capsys, "--hr", str(small), "--scale", "2", "--metrics", "haarpsi")
    assert code == 2 and out == "" and fake_metrics["haarpsi"] == []
    assert "strip.png: 40x19 is too small to score at x2 (the metrics asked for need 16 pixels" in err
    cache = tmp_path / "deg"
    code, out, err = _eval(capsys, "--hr", str(small), "--scale", "2", "--metrics", "haarpsi", "--degrade",
                           "web", "--degrade-dir", str(cache))
    assert code == 2 and "too small" in err and not cache.exists()  # before any set is built


def test_metrics_failure_names_the_image(
    capsys: pytest.CaptureFixture, sets: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
    fake_metrics: dict[str, list],
) -> None:
    from sr.evaluation import perceptual

    def broken(hr: np.ndarray, sr: np.ndarray) -> float:
        raise ValueError("cannot score this")

    monkeypatch.setitem(perceptual.METRICS, "brisque", perceptual.Metric("brisque", "brisque", False, False,
                                                                         broken))
    code, _, err = _eval(capsys, "--hr", str(sets["alpha"]), "--scale", "2", "--metrics", "brisque")
    assert code == 2
    assert err.strip().endswith("astro.png: perceptual metrics failed (cannot score this)")
