"""PSNR / SSIM on the Y channel, as the SR literature reports them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from skimage import data
from skimage.metrics import structural_similarity

from sr.metrics import psnr, rgb_to_y, ssim, to_scoring_channels

Y_GAIN = (65.481 + 128.553 + 24.966) / 255  # dY per unit of equal R, G, B change: 219/255


@pytest.fixture(scope="module")
def rgb() -> np.ndarray:
    return data.astronaut()[100:196, 150:246]  # (96, 96, 3) uint8


@pytest.fixture(scope="module")
def gray() -> np.ndarray:
    return data.camera()[200:280, 200:290]  # (80, 90) uint8


def test_rgb_to_y_matches_matlab_range() -> None:
    px = np.array([[[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]]], dtype=np.uint8)
    np.testing.assert_allclose(rgb_to_y(px)[0], [16.0, 235.0, 16 + 65.481, 16 + 128.553, 16 + 24.966])


def test_identical_images(rgb: np.ndarray, gray: np.ndarray) -> None:
    assert psnr(rgb, rgb) == math.inf
    assert ssim(rgb, rgb) == pytest.approx(1.0, abs=1e-12)
    assert psnr(gray, gray, 4, "rgb") == math.inf
    assert ssim(gray, gray, 4, "rgb") == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("d", [1, 5, 20])
def test_known_mse_gives_known_psnr(gray: np.ndarray, d: int) -> None:
    hr = np.clip(gray.astype(np.int32), 30, 200).astype(np.uint8)  # room for +d without clipping
    sr = hr.astype(np.float64) + d
    assert psnr(sr, hr) == pytest.approx(10 * math.log10(255**2 / d**2), abs=1e-9)
    # An equal change of R, G and B moves Y by d * 219/255.
    hr_rgb = np.repeat(hr[:, :, None], 3, axis=2)
    expected_y = 10 * math.log10(255**2 / (d * Y_GAIN) ** 2)
    assert psnr(hr_rgb + float(d), hr_rgb) == pytest.approx(expected_y, abs=1e-9)
    assert psnr(hr_rgb + float(d), hr_rgb, channel="rgb") == pytest.approx(psnr(sr, hr), abs=1e-9)


def test_sr_is_rounded_to_uint8_before_scoring(rgb: np.ndarray) -> None:
    assert psnr(rgb + 0.49, rgb) == math.inf
    hr = np.clip(rgb, 10, 245)  # no clipping at 0 below: every pixel is off by exactly 1 after rounding
    assert psnr(hr - 0.6, hr, channel="rgb") == pytest.approx(10 * math.log10(255**2 / 1.0), abs=1e-9)


def test_crop_border_removes_edge_errors(rgb: np.ndarray) -> None:
    sr = rgb.copy()
    sr[:3] = 0
    sr[:, -3:] = 255
    assert psnr(sr, rgb, crop_border=2) < 40
    assert psnr(sr, rgb, crop_border=3) == math.inf
    assert ssim(sr, rgb, crop_border=3) == pytest.approx(1.0, abs=1e-12)


def test_rgb_and_y_differ(rgb: np.ndarray) -> None:
    sr = rgb.astype(np.int32)
    sr[:, :, 2] = np.clip(sr[:, :, 2] + 10, 0, 255)  # blue only: weighs little in Y
    p_rgb, p_y = psnr(sr, rgb, channel="rgb"), psnr(sr, rgb, channel="y")
    mse_b = np.mean((sr[:, :, 2] - rgb[:, :, 2].astype(np.float64)) ** 2)
    assert p_rgb == pytest.approx(10 * math.log10(255**2 / (mse_b / 3)), abs=1e-9)
    assert p_y == pytest.approx(10 * math.log10(255**2 / (mse_b * (24.966 / 255) ** 2)), abs=1e-9)
    assert p_y > p_rgb + 10


def test_gray_native_and_gray_as_rgb_differ(gray: np.ndarray) -> None:
    sr = np.clip(gray.astype(np.int32) + np.random.default_rng(1).integers(-8, 9, gray.shape), 0, 255)
    native = psnr(sr, gray)
    as_rgb = psnr(np.repeat(sr[:, :, None], 3, axis=2), np.repeat(gray[:, :, None], 3, axis=2))
    # Replicated gray goes through rgb2ycbcr: errors shrink by 219/255, PSNR rises by -20 log10(219/255).
    assert as_rgb - native == pytest.approx(-20 * math.log10(Y_GAIN), abs=1e-9)
    assert to_scoring_channels(gray).shape == (80, 90, 1)
    assert to_scoring_channels(np.repeat(gray[:, :, None], 3, axis=2)).max() <= 235


def test_ssim_matches_skimage_on_uncropped_region(gray: np.ndarray) -> None:
    # skimage filters with 'reflect' padding, then averages only pixels at least 5 from the edge;
    # that equals MATLAB's 'valid' filtering, so the two agree to rounding.
    noisy = np.clip(gray + np.random.default_rng(0).normal(0, 12, gray.shape), 0, 255).round()
    ref = structural_similarity(
        noisy, gray.astype(np.float64), gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
        data_range=255,
    )
    ours = ssim(noisy, gray)
    assert 0.3 < ours < 0.95
    assert ours == pytest.approx(ref, abs=1e-9)


def test_ssim_is_mean_over_rgb_channels(rgb: np.ndarray) -> None:
    sr = np.clip(rgb + np.random.default_rng(2).normal(0, 6, rgb.shape), 0, 255).round()
    per_channel = [ssim(sr[:, :, c], rgb[:, :, c]) for c in range(3)]
    assert ssim(sr, rgb, channel="rgb") == pytest.approx(np.mean(per_channel), abs=1e-12)


def test_metric_errors(rgb: np.ndarray, gray: np.ndarray) -> None:
    with pytest.raises(ValueError, match="differ in size"):
        psnr(rgb[:-1], rgb)
    with pytest.raises(ValueError, match="channel"):
        psnr(rgb, rgb, channel="cbcr")
    with pytest.raises(ValueError, match="scored channels"):
        psnr(rgb, rgb[:, :, 0], channel="rgb")
    with pytest.raises(ValueError, match="too small"):
        ssim(rgb[:20, :20], rgb[:20, :20], crop_border=5)
