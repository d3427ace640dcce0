"""``python -m research.curves``: pixels seen along a lineage, the dB-per-doubling slope, its extrapolation,
appending a run's log, the figure, and clear errors."""

from __future__ import annotations

import json
import math

import pytest
from PIL import Image

from research.curves import CARN_M, lineage_points, main, read_rows, slopes

HEADER = "scale,run,preset,parent,step,batch,patch,valid,set5,set14\n"
# x4: a first cycle of 1000 steps at batch 4, patch 8 (0.256 Mpx), then a run from its end seeing
# six times as much again (1.536 Mpx more): log2(7) doublings, 0.02 dB gained on each set.
ROWS = (
    "4,start,asa-base,,0,4,8,28.00,31.00,28.00\n"
    "4,first,asa-base,start:0,500,4,8,28.05,31.05,28.05\n"
    "4,first,asa-base,start:0,1000,4,8,28.10,31.10,28.10\n"
    "4,second,asa-base,first:1000,1500,8,8,28.11,31.11,28.11\n"
    "4,second,asa-base,first:1000,3000,8,8,28.12,31.12,28.12\n"
)


@pytest.fixture
def points_csv(tmp_path):
    path = tmp_path / "curves.csv"
    path.write_text("# a comment line\n" + HEADER + ROWS)
    return path


def test_pixels_add_up_along_the_lineage(points_csv):
    pts = {(p.run, p.step): p for p in lineage_points(read_rows(points_csv))}
    assert pts[("start", 0)].mpix == 0
    assert pts[("first", 1000)].mpix == pytest.approx(1000 * 4 * 64 / 1e6)
    # the second run starts where first's step 1000 left off, at its own batch
    assert pts[("second", 3000)].mpix == pytest.approx(0.256 + 3000 * 8 * 64 / 1e6)


def test_slope_and_extrapolation(points_csv):
    (rec,) = slopes(lineage_points(read_rows(points_csv)))  # the first cycle has no slope
    d = math.log2(7)
    assert rec["run"] == "second" and rec["doublings"] == pytest.approx(d, abs=1e-3)
    assert rec["set14"]["gain"] == pytest.approx(0.02)
    assert rec["set14"]["per_doubling"] == pytest.approx(0.02 / d, abs=1e-4)
    gap = CARN_M[4]["set14"] - 28.12
    assert rec["set14"]["gap"] == pytest.approx(gap)
    assert rec["set14"]["times_pixels"] == pytest.approx(2 ** (gap / (0.02 / d)), rel=1e-6)
    assert "gap" not in rec["valid"]  # no bar on valid


def test_a_run_that_gains_nothing_never_reaches_the_bar(tmp_path):
    path = tmp_path / "flat.csv"
    path.write_text(HEADER + ROWS.replace("28.12,31.12,28.12", "28.10,31.10,28.10"))
    (rec,) = slopes(lineage_points(read_rows(path)))
    assert rec["set5"]["times_pixels"] is None and rec["set5"]["gpix_needed"] is None


def test_command_prints_the_table_and_draws_the_figure(points_csv, tmp_path, capsys):
    fig, out = tmp_path / "curves.png", tmp_path / "curves.json"
    assert main(["--csv", str(points_csv), "--figure", str(fig), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| x4 | second | asa-base | 0 -> 2 |" in text
    with Image.open(fig) as im:
        assert im.width > 1000 and im.height > 200  # one row (x4) of three panels plus the legend
    runs = json.loads(out.read_text())["runs"]
    assert [r["run"] for r in runs] == ["second"]


def test_add_run_appends_the_logged_validations_once(points_csv, tmp_path, capsys):
    run = tmp_path / "third"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"name": "third", "preset": "asa-deep", "scale": 4,
                                                 "batch": 8, "patch": 16}))
    log = [{"event": "init"}, {"step": 25, "loss": 0.1},
           {"step": 100, "event": "val", "valid_psnr": 28.2, "Set5_psnr": 31.2, "Set14_psnr": 28.25}]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    args = ["--csv", str(points_csv), "--add-run", str(run), "--parent", "second:3000"]
    assert main(args) == 0 and "1 rows added" in capsys.readouterr().out
    assert main(args) == 0 and "0 rows added" in capsys.readouterr().out
    pts = {p.run: p for p in lineage_points(read_rows(points_csv))}
    assert pts["third"].mpix == pytest.approx(0.256 + 0.192 * 8 + 100 * 8 * 256 / 1e6)
    assert pts["third"].psnr == {"valid": 28.2, "set5": 31.2, "set14": 28.25}


def test_errors_name_the_problem(points_csv, tmp_path, capsys):
    assert main(["--csv", str(tmp_path / "missing.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "4,orphan,asa-base,nowhere:10,100,4,8,28.0,31.0,28.0\n")
    assert main(["--csv", str(bad)]) == 2
    assert "no such run" in capsys.readouterr().err
    assert main(["--csv", str(points_csv), "--add-run", str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert main(["--csv", str(points_csv), "--parent", "first:10"]) == 2
    assert "--parent goes with --add-run" in capsys.readouterr().err
    before = points_csv.read_text()
    run = tmp_path / "r"
    run.mkdir()
    cfg = {"name": "r", "preset": "p", "scale": 4, "batch": 1, "patch": 8}
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "log.jsonl").write_text(json.dumps({"step": 5, "event": "val", "valid_psnr": 1.0}) + "\n")
    args = ["--csv", str(points_csv), "--add-run", str(run), "--parent", "first:10"]
    assert main(args) == 2
    assert "without Set5_psnr, Set14_psnr" in capsys.readouterr().err
    assert points_csv.read_text() == before  # nothing half-written
