"""``sr degrade``: one degraded set per (HR folder, level), kept when already there, every bad input a
message before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from sr.cli import main
from sr.evaluation.degraded import DEFAULT_SEED, MANIFEST, build_degraded_set


@pytest.fixture(scope="module")
def hr(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hr")
    a, b = root / "alpha", root / "beta" / "HR"
    a.mkdir()
    b.mkdir(parents=True)
    Image.fromarray(data.astronaut()[40:104, 200:264]).save(a / "astro.png")
    Image.fromarray(data.camera()[100:148, 200:250]).save(a / "cam.png")  # gray
    Image.fromarray(data.chelsea()[60:108, 150:202]).save(b / "cat.png")
    (root / "empty").mkdir()
    (root / "tiny").mkdir()
    Image.fromarray(np.zeros((10, 30, 3), np.uint8)).save(root / "tiny" / "small.png")
    (root / "corrupt").mkdir()
    (root / "corrupt" / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    return {"root": root, "alpha": a, "beta": b}


def _degrade(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(["degrade", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_builds_one_set_per_folder_and_level(capsys: pytest.CaptureFixture, hr: dict[str, Path],
                                             tmp_path: Path) -> None:
    out = tmp_path / "sets"
    code, stdout, err = _degrade(capsys, "--hr", str(hr["alpha"]), str(hr["beta"]), "--scale", "2",
                                 "--level", "all", "-o", str(out))
    assert code == 0 and err == ""
    names = [f"{s}-{lv}-x2" for s in ("alpha", "beta") for lv in ("web", "mild", "medium", "heavy", "chain")]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)  # no temporary folder left
    lines = stdout.splitlines()
    assert len(lines) == len(names) and all(line.startswith("wrote ") for line in lines)
    assert f"wrote {out / 'alpha-web-x2'}: 2 images, JPEG q" in stdout
    for name in names:
        manifest = json.loads((out / name / MANIFEST).read_text())
        assert manifest["seed"] == DEFAULT_SEED and manifest["scale"] == 2
        assert manifest["level"] == name.split("-")[1]
        assert all((out / name / f["lr"]).is_file() for f in manifest["files"])
    # the library's builder makes the very same set
    ref = build_degraded_set(hr["beta"], tmp_path / "ref", 2, "heavy")
    assert json.loads((out / "beta-heavy-x2" / MANIFEST).read_text())["files"] == ref["files"]

    # run again: every set is kept, untouched
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    code, stdout, _ = _degrade(capsys, "--hr", str(hr["alpha"]), "--scale", "2", "--level", "web,mild",
                               "-o", str(out))
    assert code == 0 and [line.split()[0] for line in stdout.splitlines()] == ["kept", "kept"]
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == stamps


def test_seed_and_scale(capsys: pytest.CaptureFixture, hr: dict[str, Path], tmp_path: Path) -> None:
    code, _, _ = _degrade(capsys, "--hr", str(hr["alpha"]), "--scale", "3", "--level", "medium", "--seed",
                          "7", "-o", str(tmp_path))
    assert code == 0
    manifest = json.loads((tmp_path / "alpha-medium-x3" / MANIFEST).read_text())
    assert manifest["seed"] == 7 and manifest["scale"] == 3
    lr = np.asarray(Image.open(tmp_path / "alpha-medium-x3" / "astro_x3.jpg"))
    assert lr.shape == (21, 21, 3)  # 64 -> modcrop 63 -> 21


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hr", "{root}/missing", "--scale", "2"], "HR folder not found"),
        (["--hr", "{root}/empty", "--scale", "2"], "no images in HR folder"),
        (["--hr", "{root}/corrupt", "--scale", "2"], "x.png: not a readable image"),
        (["--hr", "{root}/tiny", "--scale", "2"], "too small to score at x2"),
        (["--hr", "{root}/alpha", "--scale", "2", "--level", "extreme"], "level 'extreme'"),
        (["--hr", "{root}/alpha", "--scale", "2", "--level", "mild,nope"], "level 'nope'"),
        (["--hr", "{root}/alpha", "--scale", "1"], "--scale must be between 2 and 8"),
        (["--hr", "{root}/alpha", "--scale", "9"], "--scale must be between 2 and 8"),
        (["--hr", "{root}/alpha", "--scale", "2", "--seed", "-1"], "--seed must be 0 or more"),
        (["--hr", "{root}/alpha", "{root}/alpha", "--scale", "2"], "several --hr folders"),
    ],
)
def test_bad_input_is_a_message_and_writes_nothing(capsys: pytest.CaptureFixture, hr: dict[str, Path],
                                                   tmp_path: Path, argv: list[str], message: str) -> None:
    out = tmp_path / "out"
    argv = [a.format(root=hr["root"]) for a in argv]
    level = [] if "--level" in argv else ["--level", "web"]
    code, stdout, err = _degrade(capsys, *argv, *level, "-o", str(out))
    assert code == 2 and stdout == ""
    assert err.startswith("sr degrade: error: ") and message in err
    assert not out.exists()


def test_a_folder_holding_anything_else_is_refused_before_any_set_is_written(
    capsys: pytest.CaptureFixture, hr: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    build_degraded_set(hr["beta"], out / "beta-mild-x2", 2, "mild", seed=1)  # another seed
    code, stdout, err = _degrade(capsys, "--hr", str(hr["alpha"]), str(hr["beta"]), "--scale", "2",
                                 "--level", "mild", "-o", str(out))
    assert code == 2 and stdout == ""
    assert "beta-mild-x2 holds another degraded set" in err
    assert sorted(p.name for p in out.iterdir()) == ["beta-mild-x2"]  # alpha's set was not started
    (out / "alpha-mild-x2").mkdir()
    (out / "alpha-mild-x2" / "mine.png").write_bytes(b"x")
    code, _, err = _degrade(capsys, "--hr", str(hr["alpha"]), "--scale", "2", "--level", "mild",
                            "-o", str(out))
    assert code == 2 and "holds no degraded set" in err
    (tmp_path / "file").write_text("x")
    code, _, err = _degrade(capsys, "--hr", str(hr["alpha"]), "--scale", "2", "--level", "mild",
                            "-o", str(tmp_path / "file"))
    assert code == 2 and "is not a folder" in err


def test_bad_input_as_a_process_has_no_traceback(hr: dict[str, Path], tmp_path: Path) -> None:
    argv = ["--hr", str(hr["root"] / "missing"), "--scale", "2", "--level", "web", "-o", str(tmp_path)]
    proc = subprocess.run([sys.executable, "-m", "sr", "degrade", *argv], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("sr degrade: error: HR folder not found") and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
