"""quantize: the same samples as nan_to_num + clip + rint, in place when the input is scratch."""

from __future__ import annotations

import numpy as np
import pytest

from sr.io import quantize


def _reference(x: np.ndarray, dtype: type) -> np.ndarray:
    """The former formula: NaN -> 0, clip to [0, 1], scale, round half to even."""
    y = np.clip(np.nan_to_num(x.astype(np.float32), nan=0.0), 0.0, 1.0) * np.float32(np.iinfo(dtype).max)
    return np.rint(y).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("scratch", [False, True])
def test_quantize_matches_the_reference_on_edge_values(dtype, scratch):
    rng = np.random.default_rng(0)
    maxv = np.iinfo(dtype).max
    special = np.array([np.nan, np.inf, -np.inf, -0.0, -1e-30, 1.0, 1.0 + 1e-6, 7.0, -3.0,
                        0.5 / maxv, 1.5 / maxv, 2.5 / maxv, np.nextafter(np.float32(1), 0)], np.float32)
    x = np.concatenate([special, rng.uniform(-0.2, 1.2, 4000).astype(np.float32)]).reshape(-1, 1, 1)
    expected = _reference(x, dtype)
    keep = x.copy()
    got = quantize(x, dtype, scratch=scratch)
    assert got.dtype == dtype and np.array_equal(got, expected)
    if not scratch:  # the caller's array is left alone unless it said it was scratch
        assert np.array_equal(x, keep, equal_nan=True)


def test_quantize_of_float64_input_never_writes_it():
    x = np.array([[[-1.0, 0.25, 2.0]]])
    keep = x.copy()
    assert quantize(x, np.uint8, scratch=True).tolist() == [[[0, 64, 255]]]
    assert np.array_equal(x, keep)
