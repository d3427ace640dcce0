"""research.video_clips / video_scoring / video_set: the clip rule, the scores, the whole-set run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from research.video_clips import mosaic_sources, pan, pan_frames
from research.video_scoring import flicker, y_psnr

pytest.importorskip("av")


def _images(folder: Path, n: int, size: tuple[int, int] = (72, 40)) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(n):
        w, h = size if i % 2 == 0 else size[::-1]  # every other one portrait
        ramp = np.linspace(30, 220, w)[None, :, None] + np.zeros((h, 1, 3))
        img = np.clip(ramp + rng.normal(0, 10, (h, w, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(folder / f"im{i:02d}.png")
    return folder


def test_mosaic_takes_every_fourth_sorted_name(tmp_path) -> None:
    folder = _images(tmp_path / "valid", 33)
    assert [p.name for p in mosaic_sources(folder)] == [f"im{i:02d}.png" for i in range(0, 32, 4)]


def test_pan_moves_step_pixels_a_frame_and_refuses_a_small_canvas() -> None:
    canvas = np.arange(10 * 40 * 3, dtype=np.uint8).reshape(10, 40, 3)
    f = pan(canvas, 16, 8, frames=3, step=5)
    assert f.shape == (3, 8, 16, 3) and np.array_equal(f[1][:, :-5], f[0][:, 5:])
    with pytest.raises(SystemExit, match="too small"):
        pan(canvas, 16, 8, frames=6, step=5)


def test_portrait_images_are_turned(tmp_path) -> None:
    folder = _images(tmp_path / "valid", 2)
    assert pan_frames(folder / "im01.png", 2, 2, 64, 32).shape == (2, 32, 64, 3)  # 40x72 turned to 72x40


def test_psnr_and_flicker_known_values() -> None:
    a = np.zeros((4, 4))
    assert y_psnr(a, a + 0.1) == pytest.approx(20.0)
    assert flicker([a, a + 2 / 255, a]) == pytest.approx(2.0)


def test_video_set_runs_every_image_and_summarises(tmp_path, tiny_x2, capsys) -> None:
    from research.video_set import main

    folder = _images(tmp_path / "valid", 3)
    rc = main(["--valid", str(folder), "--frames", "2", "--size", "64x32", "--threads", "1",
               "--methods", str(tiny_x2), "--out-crf", "18", "--decoder-option", "skip_loop_filter=all"])
    out = capsys.readouterr().out
    assert rc == 0
    assert sum(line.startswith("im0") for line in out.splitlines()) == 3
    assert "3 images, 2 frames of 64x32 HR" in out and "vs bicubic raw: mean" in out
