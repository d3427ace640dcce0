"""research.pipeline: the photo-like mosaic it measures on, and the batch time it reads from sr upscale."""

from __future__ import annotations

import argparse

import numpy as np
from PIL import Image

from research import pipeline
from sr.batch.report import Stats, summary
from sr.batch.stages import StageTimes


def test_mosaic_fills_the_canvas_with_the_images_flipping_repeats(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.integers(1, 256, (30, 40, 3), dtype=np.uint8) for _ in range(2)]
    files = []
    for i, a in enumerate(arrays):
        files.append(tmp_path / f"{i}.png")
        Image.fromarray(a).save(files[-1])
    canvas = pipeline.mosaic(files, 100, 50)
    assert canvas.shape == (50, 100, 3) and canvas.min() >= 1  # no pixel left black
    np.testing.assert_array_equal(canvas[:30, :40], arrays[0])
    np.testing.assert_array_equal(canvas[:30, 40:80], arrays[1])
    np.testing.assert_array_equal(canvas[:30, 80:100], arrays[0][:, ::-1][:, :20])  # a repeat, flipped


def test_mosaic_jpeg_is_written_once_per_process_for_the_same_request(tmp_path, monkeypatch):
    valid = tmp_path / "valid"
    valid.mkdir()
    Image.fromarray(np.full((30, 40, 3), 120, np.uint8)).save(valid / "a.png")
    calls = []
    real = pipeline.mosaic
    monkeypatch.setattr(pipeline, "mosaic", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(pipeline, "_written", set())
    args = argparse.Namespace(valid=str(valid))
    out = tmp_path / "in" / "big.jpg"
    assert pipeline.mosaic_jpeg(args, out, 64, 48) == out and out.is_file()
    pipeline.mosaic_jpeg(args, out, 64, 48)  # big, then stages: the same file
    assert len(calls) == 1
    pipeline.mosaic_jpeg(args, out, 32, 24)  # another size is written anew
    out.unlink()
    pipeline.mosaic_jpeg(args, out, 32, 24)  # and so is a file that went away
    assert len(calls) == 3 and Image.open(out).size == (32, 24)


def test_batch_time_is_read_from_the_summary_sr_upscale_prints(capsys):
    stats = Stats(3)
    stats.done, stats.failed = 3, 0
    summary(stats, 0, 12.34)
    stats.bar.close()
    m = pipeline.BATCH_TIME.search(capsys.readouterr().out)
    assert m is not None and m.group(1) == "3" and float(m.group(3)) == 12.3
    # -v's stage sums, as the precision runs read them
    stats = Stats(2, verbose=True)
    stats.done, stats.timed = 2, 2
    stats.times = StageTimes(decode=0.5, upscale=7.25, encode=1.0)
    summary(stats, 0, 9.0)
    stats.bar.close()
    sums = pipeline.STAGE_SUMS.search(capsys.readouterr().out)
    assert sums is not None and [float(v) for v in sums.groups()] == [0.5, 7.25, 1.0]


def test_bad_arguments_exit_with_one_line(tmp_path, capsys):
    assert pipeline.main(["--valid", str(tmp_path / "none"), "--work", str(tmp_path)]) != 0
    assert "not a folder" in capsys.readouterr().err
    assert pipeline.main(["--valid", str(tmp_path), "--work", str(tmp_path), "--what", "x"]) != 0
    args = ["--valid", str(tmp_path), "--work", str(tmp_path), "--baseline", str(tmp_path)]
    assert pipeline.main(args) != 0
    assert "not a source tree of sr" in capsys.readouterr().err


def test_a_baseline_tree_runs_its_own_sr(tmp_path):
    # a stand-in checkout whose sr prints the summary line with a time of its own
    (tmp_path / "sr").mkdir()
    (tmp_path / "sr" / "__init__.py").write_text("")
    (tmp_path / "sr" / "__main__.py").write_text(
        "import sys\nprint('1 done, 0 skipped, 0 failed in 4.2 s', sys.argv[1:3])\n")
    res = pipeline.run_sr(["in", "-o", "out"], tmp_path)
    assert res["batch_s"] == 4.2 and "'upscale', 'in'" in res["out"]
