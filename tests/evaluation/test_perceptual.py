"""Perceptual metrics (sr.evaluation.perceptual): parsing and availability checks, which run without
the optional extra, and the real metrics on small images, which skip without it (CI lacks it)."""

from __future__ import annotations

import builtins
import sys

import numpy as np
import pytest
from PIL import Image, ImageFilter
from skimage import data

from sr.evaluation import perceptual
from sr.evaluation.perceptual import (
    INSTALL_HINT,
    PerceptualUnavailable,
    check_available,
    min_side,
    parse_metrics,
    score_perceptual,
)
from sr.evaluation.scoring import perceptual_crop, viewable_sr


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every metric's package taken as importable; the names checked, in order."""
    checked: list[str] = []
    monkeypatch.setattr(perceptual, "check_available", checked.append)
    return checked


def test_parse_keeps_the_perceptual_names_in_order_once(installed: list[str]) -> None:
    assert parse_metrics("psnr,ssim") == ()
    assert parse_metrics(" PSNR , ssim ,") == ()
    assert parse_metrics("brisque,psnr,HaarPSI,brisque") == ("brisque", "haarpsi")
    assert parse_metrics("cvvdp") == ("cvvdp",)  # psnr and ssim are scored all the same
    assert installed == ["brisque", "haarpsi", "cvvdp"]  # each checked when parsed


@pytest.mark.parametrize("text", ["psnr,lpips", "dists", "ssim,haarpsi,fid"])
def test_parse_rejects_an_unknown_name_listing_the_choices(text: str, installed: list[str]) -> None:
    with pytest.raises(ValueError, match=r"unknown metric\(s\) (lpips|dists|fid); choose from psnr, ssim, "
                                         r"haarpsi, cvvdp, cvvdp-zoom, brisque"):
        parse_metrics(text)
    assert installed == []  # nothing imported for a bad list


@pytest.mark.parametrize("text", ["", " , ,"])
def test_parse_rejects_an_empty_list(text: str) -> None:
    with pytest.raises(ValueError, match="no metric named"):
        parse_metrics(text)


@pytest.mark.parametrize(
    "metric, module, package",
    [("haarpsi", "piq", "piq"), ("cvvdp", "pycvvdp", "cvvdp"), ("brisque", "cv2", "opencv-python-headless"),
     ("brisque", "brisque", "brisque")],
)
def test_a_missing_package_is_named_with_the_extra(monkeypatch: pytest.MonkeyPatch, metric: str, module: str,
                                                   package: str) -> None:
    if module == "brisque":
        monkeypatch.setitem(sys.modules, "cv2", sys.modules.get("cv2") or object())  # cv2 found, brisque not
    monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError, as if not installed
    with pytest.raises(PerceptualUnavailable) as e:
        check_available(metric)
    assert f"the {package!r} metric package cannot be imported" in str(e.value)
    assert INSTALL_HINT in str(e.value) and "'.[perceptual]'" in str(e.value)
    with pytest.raises(PerceptualUnavailable):
        parse_metrics(f"psnr,ssim,{metric}")


def test_a_torchvision_of_another_torch_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "piq":
            raise RuntimeError("operator torchvision::nms does not exist\nmore lines")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(PerceptualUnavailable) as e:
        check_available("haarpsi")
    message = str(e.value)
    assert "operator torchvision::nms does not exist; torchvision must be the release made for this torch" \
        in message and "\n" not in message


def test_min_side_is_haarpsis_when_asked() -> None:
    assert min_side(()) == 0 and min_side(("cvvdp", "brisque")) == 0
    assert min_side(("brisque", "haarpsi")) == 16


def test_perceptual_crop_is_the_modcrop_and_the_scale_border() -> None:
    hr = np.arange(11 * 9 * 3, dtype=np.uint16).reshape(11, 9, 3).astype(np.uint8)  # not a multiple of 2
    sr = np.zeros((10, 8, 3), np.uint8)  # the modcropped size
    hr_c, sr_c = perceptual_crop(hr, sr, 2)
    assert hr_c.shape == sr_c.shape == (6, 4, 3)
    np.testing.assert_array_equal(hr_c, hr[2:8, 2:6])
    gray_hr, gray_sr = perceptual_crop(hr[:, :, 0], sr, 3)  # gray HR beside an RGB SR (--gray-as-rgb)
    assert gray_hr.shape == (4, 2) and gray_sr.shape == (4, 2, 3)


def test_viewable_sr_is_rgb_bicubic_for_the_y_only_baseline() -> None:
    from sr.evaluation import make_lr
    from sr.resize import imresize, modcrop

    hr = data.astronaut()[:50, :48]
    y_only = np.zeros((50, 48), np.uint8)
    view = viewable_sr(y_only, hr, 2)
    np.testing.assert_array_equal(view, imresize(make_lr(modcrop(hr, 2), 2), 2))
    rgb = np.ones((50, 48, 3), np.uint8)
    assert viewable_sr(rgb, hr, 2) is rgb  # a model's output is itself
    gray = np.ones((50, 48), np.uint8)
    assert viewable_sr(gray, hr[:, :, 0], 2) is gray  # gray scored gray
    assert viewable_sr(gray, hr[:, :, 0], 2, gray_as_rgb=True).shape == (50, 48, 3)


def test_score_perceptual_wants_the_same_size() -> None:
    with pytest.raises(ValueError, match="differ in size"):
        score_perceptual((), np.zeros((8, 8, 3), np.uint8), np.zeros((8, 9, 3), np.uint8))


# -- the real metrics: only with the perceptual extra installed -------------------------------------------


def _images() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 64x64 photo crop, the same blurred (sigma 1.5) and with Gaussian noise (sigma 12)."""
    hr = data.astronaut()[100:164, 180:244]
    blur = np.asarray(Image.fromarray(hr).filter(ImageFilter.GaussianBlur(1.5)))
    noisy = np.clip(hr + np.random.default_rng(0).normal(0, 12, hr.shape), 0, 255).astype(np.uint8)
    return hr, blur, noisy


def test_haarpsi_real() -> None:
    pytest.importorskip("piq")
    hr, blur, noisy = _images()
    assert parse_metrics("haarpsi") == ("haarpsi",)
    assert score_perceptual(("haarpsi",), hr, hr)["haarpsi"] == pytest.approx(1.0, abs=1e-4)
    blurred = score_perceptual(("haarpsi",), hr, blur)["haarpsi"]
    assert 0.5 < blurred < 0.95
    assert score_perceptual(("haarpsi",), hr, noisy)["haarpsi"] < 0.98
    gray = data.camera()[100:164, 200:264]
    gray_blur = np.asarray(Image.fromarray(gray).filter(ImageFilter.GaussianBlur(1.5)))
    as_rgb = np.repeat(gray_blur[:, :, None], 3, axis=2)
    assert score_perceptual(("haarpsi",), gray, gray_blur) == score_perceptual(
        ("haarpsi",), np.repeat(gray[:, :, None], 3, axis=2), as_rgb)  # gray is repeated to RGB
    with pytest.raises(ValueError):  # piq's 16-pixel minimum, which min_side() tells plan_sets
        score_perceptual(("haarpsi",), hr[:15, :15], hr[:15, :15])


def test_cvvdp_real() -> None:
    pytest.importorskip("pycvvdp")
    hr, blur, noisy = _images()
    assert parse_metrics("cvvdp") == ("cvvdp",)
    assert score_perceptual(("cvvdp",), hr, hr)["cvvdp"] == pytest.approx(10.0, abs=1e-3)
    blurred = score_perceptual(("cvvdp",), hr, blur)["cvvdp"]
    assert 5.0 < blurred < 9.5
    assert score_perceptual(("cvvdp",), hr, noisy)["cvvdp"] < 9.8
    assert perceptual._cvvdp_metric().display_photometry is not None  # built once, on standard_fhd
    assert perceptual.CVVDP_DISPLAY == "standard_fhd"


def test_brisque_real_scores_the_output_alone() -> None:
    pytest.importorskip("brisque")
    pytest.importorskip("cv2")
    hr, blur, _ = _images()
    assert parse_metrics("brisque") == ("brisque",)
    sharp = score_perceptual(("brisque",), hr, hr)["brisque"]
    blurred = score_perceptual(("brisque",), hr, blur)["brisque"]
    assert blurred > sharp + 10  # blur is less natural: a higher BRISQUE
    # no reference (approx: the package's score of one image varies in the 12th digit from call to call)
    without_hr = score_perceptual(("brisque",), np.zeros_like(hr), blur)["brisque"]
    assert without_hr == pytest.approx(blurred, abs=1e-6)


def test_sr_eval_metrics_real(tmp_path, capsys: pytest.CaptureFixture) -> None:
    """`sr eval --metrics` with the real packages: each column as score_perceptual gives it on the
    modcropped, border-cut HR and the RGB bicubic of its LR, the means their means."""
    import json

    for module in ("piq", "pycvvdp", "brisque", "cv2"):
        pytest.importorskip(module)
    from sr.cli import main
    from sr.evaluation import make_lr
    from sr.resize import imresize

    folder = tmp_path / "tiny"
    folder.mkdir()
    crops = {"astro": data.astronaut()[100:164, 180:244], "cat": data.chelsea()[60:125, 150:214]}  # 65 rows
    for name, img in crops.items():
        Image.fromarray(img).save(folder / f"{name}.png")
    js = tmp_path / "r.json"
    code = main(["eval", "--hr", str(folder), "--scale", "2", "--metrics", "psnr,ssim,haarpsi,cvvdp,brisque",
                 "--json", str(js)])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err
    assert "   HaarPSI     CVVDP   BRISQUE" in out and "JOD, standard_fhd display" in out
    doc = json.loads(js.read_text())
    assert doc["metrics"] == ["psnr", "ssim", "haarpsi", "cvvdp", "brisque"]
    assert doc["cvvdp_display"] == "standard_fhd"
    (s,) = doc["sets"]
    for row in s["per_image"]:
        hr = crops[row["image"]][:64, :64]
        sr = imresize(make_lr(hr, 2), 2)
        want = score_perceptual(("haarpsi", "cvvdp", "brisque"), hr[2:-2, 2:-2], sr[2:-2, 2:-2])
        assert {m: row[m] for m in want} == pytest.approx(want, rel=1e-6)
        assert 0.5 < row["haarpsi"] < 1 and 6 < row["cvvdp"] < 10
    for m in ("haarpsi", "cvvdp", "brisque"):
        assert s[m] == pytest.approx(np.mean([r[m] for r in s["per_image"]]))


def test_cvvdp_zoom_sees_a_fine_pattern_that_hides_at_1_to_1() -> None:
    pytest.importorskip("pycvvdp")
    hr = _images()[0]
    assert perceptual.zoom(hr).shape == (2 * hr.shape[0], 2 * hr.shape[1], 3)
    assert np.array_equal(perceptual.zoom(hr)[1::2, 1::2], hr)  # every pixel a 2 x 2 block
    # a 4 px checker of +-3 grey levels: the kind of fixed pattern a viewer spots only when zoomed
    yy, xx = np.mgrid[: hr.shape[0], : hr.shape[1]]
    checker = np.where(((yy // 2) + (xx // 2)) % 2 == 0, 3, -3)[:, :, None]
    stamped = np.clip(hr.astype(int) + checker, 0, 255).astype(np.uint8)
    assert parse_metrics("cvvdp-zoom") == ("cvvdp-zoom",)
    assert score_perceptual(("cvvdp-zoom",), hr, hr)["cvvdp-zoom"] == pytest.approx(10.0, abs=1e-3)
    scores = score_perceptual(("cvvdp", "cvvdp-zoom"), hr, stamped)
    assert scores["cvvdp-zoom"] < scores["cvvdp"] < 10.0
