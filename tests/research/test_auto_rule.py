"""research.auto_rule: auto's set score is the chosen model's per-image PSNR, file by file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from research import auto_rule
from sr import NEAR_LOSSLESS_QUALITY


def _set(tmp_path: Path) -> tuple[Path, Path]:
    """HR folder of three images; LR folder: a JPEG q40, a JPEG at the threshold, a PNG."""
    hr, lr = tmp_path / "hr", tmp_path / "lr"
    hr.mkdir()
    lr.mkdir()
    rng = np.random.default_rng(0)
    for name, fmt, options in (("a", "JPEG", {"quality": 40}),
                               ("b", "JPEG", {"quality": NEAR_LOSSLESS_QUALITY}),
                               ("c", "PNG", {})):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(hr / f"{name}.png")
        ext = "jpg" if fmt == "JPEG" else "png"
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(lr / f"{name}_x2.{ext}",
                                                                                 format=fmt, **options)
    return hr, lr


def _doc(hr: Path, lr: Path | None, psnrs: dict[str, float]) -> dict:
    per = [{"image": k, "psnr": v, "ssim": 0.5} for k, v in psnrs.items()]
    return {"sets": [{"name": "t", "hr": str(hr), "lr": str(lr) if lr else None, "images": len(per),
                      "psnr": sum(psnrs.values()) / len(per), "per_image": per}]}


def test_auto_takes_photo_only_below_the_threshold(tmp_path) -> None:
    hr, lr = _set(tmp_path)
    rules = auto_rule.pair_sets(_doc(hr, lr, {"a": 30.0, "b": 31.0, "c": 32.0}),
                                _doc(hr, lr, {"a": 33.0, "b": 34.0, "c": 35.0}))
    (rule,) = rules
    assert rule.auto(NEAR_LOSSLESS_QUALITY) == pytest.approx(((33.0 + 31.0 + 32.0) / 3, 1))
    assert rule.auto(101) == pytest.approx(((33.0 + 34.0 + 32.0) / 3, 2))  # every JPEG to photo
    assert rule.auto(30) == pytest.approx(((30.0 + 31.0 + 32.0) / 3, 0))


def test_sets_without_lr_files_are_lossless_and_mismatches_are_errors(tmp_path, capsys) -> None:
    hr, lr = _set(tmp_path)
    (rule,) = auto_rule.pair_sets(_doc(hr, None, {"a": 30.0, "b": 31.0, "c": 32.0}),
                                  _doc(hr, None, {"a": 40.0, "b": 40.0, "c": 40.0}))
    assert rule.auto(101) == pytest.approx((31.0, 0))
    with pytest.raises(ValueError, match="other LR folders"):
        auto_rule.pair_sets(_doc(hr, lr, {"a": 1.0}), _doc(hr, None, {"a": 1.0}))
    with pytest.raises(ValueError, match="other images"):
        auto_rule.pair_sets(_doc(hr, lr, {"a": 1.0}), _doc(hr, lr, {"b": 1.0}))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_doc(hr, lr, {"a": 30.0, "b": 31.0, "c": 32.0})))
    b.write_text(json.dumps(_doc(hr, lr, {"a": 33.0, "b": 34.0, "c": 35.0})))
    assert auto_rule.main([str(a), str(b), "--quality", "101"]) == 0
    out = capsys.readouterr().out
    assert "| t | 3 | 31.000 | 34.000 | 32.000 (1/3 photo) | 33.000 (2/3 photo) |" in out
    assert auto_rule.main([str(a), str(tmp_path / "missing.json")]) == 2
    assert auto_rule.main([str(a), str(b), "--quality", "0"]) == 2
    assert "error" in capsys.readouterr().err
