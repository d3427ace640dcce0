"""sr.evaluation.sets: LR partners found by file name, set names, headers checked before scoring."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sr.evaluation import EvaluationError, lr_key, match_lr, plan_sets, score_pairs, set_names


def test_lr_name_matching() -> None:
    assert lr_key("baby_LRBI_x2") == "baby"
    assert lr_key("0801x4") == "0801"
    assert lr_key("img_001_SRF_2_LR") == "img_001"
    assert lr_key("baby_LR") == "baby"
    assert lr_key("baby") == "baby"
    hr = [Path("box2.png"), Path("baby_HR.png")]
    lr = [Path("l/baby_LR.png"), Path("l/box2x2.png"), Path("l/box.png")]
    assert match_lr(hr, lr) == [Path("l/box2x2.png"), Path("l/baby_LR.png")]
    with pytest.raises(EvaluationError, match="several LR images"):
        match_lr([Path("a.png")], [Path("l/a_x2.png"), Path("l/a_x3.png")])


def test_set_names_are_unique_and_descriptive(tmp_path: Path) -> None:
    dirs = [tmp_path / "x" / "Set5", tmp_path / "Set14" / "HR", tmp_path / "y" / "Set5"]
    assert set_names(dirs) == ["Set5", "Set14", "Set5-2"]


def test_plan_and_score_a_set_with_matched_lr_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    hr_dir, lr_dir = tmp_path / "HR", tmp_path / "LR"
    hr_dir.mkdir(), lr_dir.mkdir()
    hr = rng.integers(0, 256, (40, 36, 3), dtype=np.uint8)
    Image.fromarray(hr).save(hr_dir / "img.png")
    Image.fromarray(hr[::2, ::2]).save(lr_dir / "img_x2.png")
    [plan] = plan_sets([str(hr_dir)], [str(lr_dir)], 2)
    assert plan.pairs == [(hr_dir / "img.png", lr_dir / "img_x2.png")]
    nearest = lambda lr: np.repeat(np.repeat(lr, 2, 0), 2, 1)  # noqa: E731
    [(path, got_hr, psnr, ssim, sr)] = list(score_pairs(plan, nearest, 2))
    assert path == hr_dir / "img.png" and np.array_equal(got_hr, hr) and sr.shape == hr.shape
    assert np.isfinite(psnr) and -1 <= ssim <= 1
    with pytest.raises(EvaluationError, match="is not 3 x LR"):
        plan_sets([str(hr_dir)], [str(lr_dir)], 3)
