"""MATLAB-compatible bicubic imresize (numpy and torch) and modcrop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sr.resize import imresize, imresize_torch, modcrop, resize_matrix


def _cubic(x: float) -> float:
    # Keys' kernel, a = -0.5, written out independently of sr.resize for the hand checks below.
    x = abs(x)
    if x <= 1:
        return 1.5 * x**3 - 2.5 * x**2 + 1
    if x <= 2:
        return -0.5 * x**3 + 2.5 * x**2 - 4 * x + 2
    return 0.0


@pytest.fixture
def img() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, size=(23, 31, 3))


@pytest.mark.parametrize(
    "scale, size",
    [(0.5, None), (1 / 3, None), (0.25, None), (0.37, None), (2.0, None), (3.0, None), (1.7, None),
     (None, (10, 40)), (None, (50, 12))],
)
def test_torch_matches_numpy(img: np.ndarray, scale: float | None, size: tuple[int, int] | None) -> None:
    ref = imresize(img, scale=scale, size=size)
    out = imresize_torch(torch.from_numpy(img).permute(2, 0, 1).float(), scale=scale, size=size)
    out = out.permute(1, 2, 0).double().numpy()
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, atol=1e-5)


def test_torch_batched_and_float64() -> None:
    x = torch.rand(2, 3, 17, 12, dtype=torch.float64)
    out = imresize_torch(x, 0.5)
    assert out.shape == (2, 3, 9, 6) and out.dtype == torch.float64
    ref = imresize(x[1, 2].numpy(), 0.5)
    np.testing.assert_allclose(out[1, 2].numpy(), ref, atol=1e-12)


@pytest.mark.parametrize("shape, scale", [((23, 31), 0.5), ((23, 31), 1 / 3), ((7, 5), 2.0), ((9, 10), 1.7),
                                          ((100, 3), 0.37)])
def test_output_size_is_ceil(shape: tuple[int, int], scale: float) -> None:
    out = imresize(np.zeros(shape), scale)
    assert out.shape == (math.ceil(shape[0] * scale), math.ceil(shape[1] * scale))


def test_scale_one_is_identity(img: np.ndarray) -> None:
    np.testing.assert_allclose(imresize(img, 1.0), img, atol=1e-12)
    u8 = (img * 255).round().astype(np.uint8)
    np.testing.assert_array_equal(imresize(u8, 1.0), u8)


@pytest.mark.parametrize("scale", [0.5, 1 / 3, 2.0, 1.3])
def test_constant_image_stays_constant(scale: float) -> None:
    out = imresize(np.full((13, 8, 3), 0.3), scale)
    np.testing.assert_allclose(out, 0.3, atol=1e-12)
    u8 = imresize(np.full((13, 8), 77, dtype=np.uint8), scale)
    assert u8.dtype == np.uint8 and (u8 == 77).all()


def test_matrix_rows_sum_to_one() -> None:
    for n, m, s in [(10, 5, 0.5), (10, 4, 1 / 3), (5, 10, 2.0), (7, 12, 12 / 7)]:
        np.testing.assert_allclose(resize_matrix(n, m, s).sum(axis=1), 1.0, atol=1e-12)


def test_upscale_by_two_hand_checked() -> None:
    # Output pixel 1 of a x2 upscale sits at u = 1/2 + 0.5 * (1 - 1/2) = 0.75 (1-based input coordinates).
    # Taps at input indices -2..3 with distances 2.75, 1.75, 0.75, -0.25, -1.25, -2.25; symmetric
    # padding folds index 0 onto 1 and -1 onto 2. So out[0] = (k(.75) + k(.25)) v1 + (k(1.75) + k(1.25)) v2.
    w1, w2 = _cubic(0.75) + _cubic(0.25), _cubic(1.75) + _cubic(1.25)
    assert (w1, w2) == (1.09375, -0.09375)
    v = np.array([[10.0, 50.0, 20.0, 80.0]])
    out = imresize(v, 2.0)
    assert out.shape == (2, 8)
    assert out[0, 0] == pytest.approx(w1 * 10 + w2 * 50, abs=1e-12)
    # Output pixel 3 sits at u = 1.75: taps 0..5 at distances 1.75, 0.75, -0.25, -1.25, -2.25, -3.25.
    expected = _cubic(1.75) * 10 + _cubic(0.75) * 10 + _cubic(0.25) * 50 + _cubic(1.25) * 20
    assert out[0, 2] == pytest.approx(expected, abs=1e-12)
    np.testing.assert_allclose(out[1], out[0])  # one row upscaled stays one row, duplicated


def test_downscale_by_two_hand_checked() -> None:
    # Antialiased /2: kernel stretched to width 8, weights 0.5 * k(d / 2). Output pixel 1 sits at
    # u = 1.5; taps at -3..6, i.e. distances 4.5 .. -4.5. Index 0,-1,-2,-3 fold to 1,2,3,4; 5,6 to 4,3.
    taps = np.arange(-3, 7)
    w = np.array([0.5 * _cubic((1.5 - t) / 2) for t in taps])
    w /= w.sum()
    fold = {-3: 4, -2: 3, -1: 2, 0: 1, 5: 4, 6: 3}
    v = np.array([3.0, -1.0, 7.0, 2.0])
    expected = sum(wi * v[fold.get(t, t) - 1] for wi, t in zip(w, taps, strict=True))
    out = imresize(v[:, None], 0.5)
    assert out.shape == (2, 1)
    assert out[0, 0] == pytest.approx(expected, abs=1e-12)


def test_uint8_is_rounded_and_clipped() -> None:
    # A step edge overshoots under bicubic: the float result leaves [0, 255], uint8 is clipped.
    step = np.zeros((4, 8), dtype=np.uint8)
    step[:, 4:] = 255
    f = imresize(step.astype(np.float64), 2.0)
    u = imresize(step, 2.0)
    assert f.min() < 0 and f.max() > 255
    assert u.dtype == np.uint8
    np.testing.assert_array_equal(u, np.clip(np.round(f), 0, 255))


def test_resize_errors() -> None:
    with pytest.raises(ValueError):
        imresize(np.zeros((4, 4)), scale=-1)
    with pytest.raises(ValueError):
        imresize(np.zeros((4, 4)))
    with pytest.raises(ValueError):
        imresize(np.zeros((4, 4, 3, 1)), 0.5)
    with pytest.raises(TypeError):
        imresize_torch(torch.zeros(4, 4, dtype=torch.uint8), 0.5)


@pytest.mark.parametrize("shape, scale, expected", [((10, 13, 3), 2, (10, 12, 3)), ((10, 13), 3, (9, 12)),
                                                    ((8, 8), 4, (8, 8)), ((7, 9), 4, (4, 8))])
def test_modcrop(shape: tuple[int, ...], scale: int, expected: tuple[int, ...]) -> None:
    img = np.arange(np.prod(shape)).reshape(shape)
    out = modcrop(img, scale)
    assert out.shape == expected
    np.testing.assert_array_equal(out, img[: expected[0], : expected[1]])  # bottom/right edges go
