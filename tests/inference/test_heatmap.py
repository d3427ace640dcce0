"""Budget heat-map colouring: inferno from black to pale yellow, scaled by k_max."""

from __future__ import annotations

import numpy as np
import pytest

from sr.inference import budget_heatmap
from sr.inference.heatmap import LUT


def luminance(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float64) @ np.array([0.2126, 0.7152, 0.0722])


def test_lut_matches_inferno_anchors_and_is_perceptually_ordered():
    # matplotlib's inferno at 0, 0.5 and 1 (x255): (0, 0, 4), (188, 55, 84), (252, 255, 164)
    for t, ref in [(0, (0, 0, 4)), (128, (188, 55, 84)), (255, (252, 255, 164))]:
        assert np.abs(LUT[t].astype(int) - ref).max() <= 5
    assert np.all(np.diff(luminance(LUT)) > -0.5)  # brightness never drops: low budget = dark


def test_heatmap_scaling_and_shape():
    b = np.array([[0.0, 2.0], [4.0, 8.0]], dtype=np.float32)
    heat = budget_heatmap(b, k_max=8)
    assert heat.shape == (2, 2, 3) and heat.dtype == np.uint8
    np.testing.assert_array_equal(heat[0, 0], LUT[0])
    np.testing.assert_array_equal(heat[1, 1], LUT[255])
    np.testing.assert_array_equal(heat[1, 0], LUT[128])
    np.testing.assert_array_equal(budget_heatmap(b), heat)  # default k_max: the map's maximum
    np.testing.assert_array_equal(budget_heatmap(b, k_max=16)[1, 1], LUT[128])
    assert (budget_heatmap(np.zeros((3, 4))) == LUT[0]).all()
    assert (budget_heatmap(np.full((2, 2), np.nan)) == LUT[0]).all()


def test_heatmap_rejects_non_2d():
    with pytest.raises(ValueError, match="H, W"):
        budget_heatmap(np.zeros((2, 2, 1)))
