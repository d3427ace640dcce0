"""The fixed-pattern (lattice) measure of sr.evaluation.perceptual: a pattern stamped per output phase
scores its amplitude, a natural or smooth image without one scores near 0, and `sr eval --metrics
lattice` gives the same numbers without the perceptual extra."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from skimage import data

from sr.evaluation.perceptual import (
    LATTICE_MIN_PIXELS,
    check_available,
    lattice,
    parse_metrics,
    score_perceptual,
)
from sr.evaluation.sets import SetPlan, SetResult
from sr.resize import imresize


def _smooth(h: int = 96, w: int = 96) -> np.ndarray:
    """A sky-like RGB image: a gentle gradient with sensor noise of 1 grey level."""
    yy, xx = np.mgrid[0:h, 0:w]
    noise = np.random.default_rng(1).normal(0, 1, (h, w))
    grey = np.clip(np.round(90 + 0.4 * yy + 0.3 * xx + noise), 0, 255)
    return np.repeat(grey[:, :, None], 3, axis=2).astype(np.uint8)


def _stamp(img: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """``img`` with ``pattern`` (one value per output phase) added to every pixel of that phase."""
    s = pattern.shape[0]
    reps = (img.shape[0] // s + 1, img.shape[1] // s + 1)
    tiled = np.tile(pattern, reps)[: img.shape[0], : img.shape[1]]
    return np.clip(np.round(img + tiled[:, :, None]), 0, 255).astype(np.uint8)


DOTS = np.array([[0.0, 0, 0, 0], [0, 6, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])  # one bright dot per 4x4 cell


def test_a_stamped_dot_lattice_scores_high_and_the_clean_image_near_zero() -> None:
    hr = _smooth()
    clean = lattice(hr, hr, 4)
    dotted = lattice(hr, _stamp(hr, DOTS), 4)
    assert clean < 0.1
    # the 16 phase means of a 6-level dot on one phase: a high-pass of about 6 - 6/16 there and about
    # -6/16 elsewhere (the blur spreads the dot), so a standard deviation near 6 * sqrt(15) / 16
    assert dotted > 1.0 and dotted > 20 * clean


def test_a_natural_photo_and_its_bicubic_upscale_score_near_zero() -> None:
    hr = data.astronaut()  # 512 x 512, smooth background and textured suit
    assert lattice(hr, hr, 4) < 0.05
    sr = imresize(imresize(hr, 1 / 4), 4)  # no per-phase pattern: bicubic is shift-invariant
    sr = np.clip(np.round(sr), 0, 255).astype(np.uint8)
    assert lattice(hr, sr, 4) < 0.1
    assert lattice(hr, _stamp(sr, DOTS), 4) > 1.0


def test_the_pattern_is_measured_at_the_given_period() -> None:
    hr = _smooth()
    two = np.array([[2.0, -2.0], [-2.0, 2.0]])  # a 2-pixel checkerboard
    stamped = _stamp(hr, two)
    assert lattice(hr, stamped, 2) > 1.0
    assert lattice(hr, stamped, 3) < 0.2  # at period 3 every phase sees both signs alike


def test_it_is_measured_only_where_hr_is_smooth() -> None:
    hr = _smooth()
    textured = hr.copy()
    textured[:, 48:] = np.random.default_rng(2).integers(0, 255, (96, 48, 1), dtype=np.uint8)
    # a lattice where HR is busy (a model's texture, not a flat-area artefact) is not counted
    pattern_right = _stamp(hr, DOTS)
    pattern_right[:, :48] = hr[:, :48]
    assert lattice(textured, pattern_right, 4) < 0.1
    pattern_left = _stamp(hr, DOTS)
    pattern_left[:, 48:] = hr[:, 48:]
    assert lattice(textured, pattern_left, 4) > 1.0


def test_too_little_smooth_area_is_not_scored() -> None:
    busy = np.random.default_rng(3).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    assert np.isnan(lattice(busy, busy, 4))
    # the set's mean leaves such an image out
    res = SetResult(SetPlan("s", None, None, []), metrics=("lattice",))  # type: ignore[arg-type]
    res.perceptual = [{"lattice": 0.5}, {"lattice": float("nan")}, {"lattice": 0.1}]
    assert res.mean("lattice") == pytest.approx(0.3)
    res.perceptual = [{"lattice": float("nan")}]
    assert np.isnan(res.mean("lattice"))
    assert LATTICE_MIN_PIXELS > 0


def test_gray_images_are_scored_on_their_values() -> None:
    hr = _smooth()[:, :, 0]
    assert lattice(hr, _stamp(hr[:, :, None], DOTS)[:, :, 0], 4) == pytest.approx(
        lattice(np.repeat(hr[:, :, None], 3, 2), _stamp(hr[:, :, None], DOTS)[:, :, 0], 4), rel=1e-9)


def test_it_needs_the_scale_and_no_extra_package() -> None:
    hr = _smooth(32, 32)
    with pytest.raises(ValueError, match="lattice metric needs the scale"):
        score_perceptual(("lattice",), hr, hr)
    assert score_perceptual(("lattice",), hr, hr, 4) == {"lattice": lattice(hr, hr, 4)}
    check_available("lattice")  # imports nothing optional
    assert parse_metrics("psnr,lattice") == ("lattice",)


def test_sr_eval_metrics_lattice(tmp_path, capsys: pytest.CaptureFixture) -> None:
    """`sr eval --metrics lattice`: the column is lattice() of the modcropped HR and the RGB bicubic of
    its LR, both with the scale's border cut (which keeps the phases), the set's value their mean."""
    from sr.cli import main
    from sr.evaluation import make_lr

    folder = tmp_path / "tiny"
    folder.mkdir()
    crops = {"sky": _smooth(98, 101), "astro": data.astronaut()[:128, :128]}
    for name, img in crops.items():
        Image.fromarray(img).save(folder / f"{name}.png")
    js = tmp_path / "r.json"
    code = main(["eval", "--hr", str(folder), "--scale", "4", "--metrics", "psnr,lattice", "--json", str(js)])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err
    assert "Lattice" in out and "pattern locked to the LR grid" in out
    doc = json.loads(js.read_text())
    assert doc["metrics"] == ["psnr", "ssim", "lattice"]
    (s,) = doc["sets"]
    for row in s["per_image"]:
        img = crops[row["image"]]
        hr = img[: img.shape[0] // 4 * 4, : img.shape[1] // 4 * 4]
        sr = imresize(make_lr(hr, 4), 4)
        sr = np.clip(np.round(sr), 0, 255).astype(np.uint8)
        assert row["lattice"] == pytest.approx(lattice(hr[4:-4, 4:-4], sr[4:-4, 4:-4], 4), rel=1e-9)
    assert s["lattice"] == pytest.approx(np.mean([r["lattice"] for r in s["per_image"]]))
