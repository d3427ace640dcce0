"""Results as files: JSON/CSV rows and means, blind means of the mild/medium/heavy sets, and
score_set's saved images and failures."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sr.evaluation import (
    EvaluationError,
    SetPlan,
    SetResult,
    blind_means,
    plan_sets,
    results_csv,
    results_json,
    score_set,
)


def _result(name: str, hr_dir: str, rows: list[tuple[str, float, float]]) -> SetResult:
    res = SetResult(SetPlan(name, Path(hr_dir), None, []))
    res.rows = rows
    return res


def test_blind_mean_per_hr_folder_of_two_or_more_levels() -> None:
    results = [
        _result("a-mild-x2", "/h/a", [("1", 30.0, 0.9), ("2", 32.0, 0.8)]),
        _result("a-heavy-x2", "/h/a", [("1", 20.0, 0.5), ("2", 22.0, 0.7)]),
        _result("a-web-x2", "/h/a", [("1", 99.0, 1.0), ("2", 99.0, 1.0)]),  # not a blind level
        _result("b-mild-x2", "/h/b", [("1", 25.0, 0.6)]),  # one level only: no blind mean
    ]
    levels = {"a-mild-x2": "mild", "a-heavy-x2": "heavy", "a-web-x2": "web", "b-mild-x2": "mild"}
    (blind,) = blind_means(results, levels, 2)
    assert blind.name == "a-blind-mean-x2" and blind.levels == ["mild", "heavy"] and blind.images == 2
    assert blind.psnr == pytest.approx((31.0 + 21.0) / 2)
    assert blind.ssim == pytest.approx((0.85 + 0.6) / 2)


def test_json_writes_infinite_psnr_as_null_and_csv_has_a_mean_row() -> None:
    res = _result("s", "/h/s", [("x", math.inf, 1.0), ("y", 30.0, 0.5)])
    doc = json.loads(results_json([res], {"model": "m"}))
    assert doc["model"] == "m"
    (s,) = doc["sets"]
    assert [r["psnr"] for r in s["per_image"]] == [None, 30.0] and s["images"] == 2
    rows = list(csv.reader(io.StringIO(results_csv([res]))))
    assert rows[0] == ["set", "kind", "image", "psnr", "ssim"]
    assert [r[1] for r in rows[1:]] == ["image", "image", "mean"]
    assert rows[-1][4] == "0.7500"


def test_score_set_saves_each_image_and_reports_it(tmp_path: Path) -> None:
    hr = tmp_path / "hr" / "set"
    hr.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).save(hr / f"{name}.png")
    (plan,) = plan_sets([str(hr)], None, 2)
    seen = []
    res = score_set(plan, None, 2, save_dir=tmp_path / "out", on_image=lambda *row: seen.append(row))
    assert [r[0] for r in res.rows] == ["a", "b"] and seen == res.rows
    assert Image.open(tmp_path / "out" / plan.name / "a.png").size == (32, 24)


def test_score_set_names_the_image_that_fails(tmp_path: Path) -> None:
    hr = tmp_path / "set"
    hr.mkdir()
    Image.fromarray(np.zeros((24, 32, 3), np.uint8)).save(hr / "a.png")
    (plan,) = plan_sets([str(hr)], None, 2)

    def broken(lr: np.ndarray) -> np.ndarray:
        raise RuntimeError("out of memory")

    with pytest.raises(EvaluationError, match=r"a\.png: inference failed \(out of memory\); try --device"):
        score_set(plan, broken, 2)
