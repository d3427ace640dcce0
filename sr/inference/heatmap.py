"""Colour an attention-budget map with a perceptual colormap (inferno), in numpy alone."""

from __future__ import annotations

import numpy as np

# Degree-6 polynomial fit of matplotlib's 'inferno' (Matt Zucker's CC0 fit, shadertoy WlfXRN):
# colour(t) = sum_i c_i t^i per channel, within ~1/255 of the original table. Rows: c0..c6; cols: RGB.
_INFERNO = np.array(
    [
        [0.0002189403691192265, 0.001651004631001012, -0.01948089843709184],
        [0.1065134194856116, 0.5639564367884091, 3.932712388889277],
        [11.60249308247187, -3.972853965665698, -15.9423941062914],
        [-41.70399613139459, 17.43639888205313, 44.35414519872813],
        [77.162935699427, -33.40235894210092, -81.80730925738993],
        [-71.31942824499214, 32.62606426397723, 73.20951985803202],
        [25.13112622477341, -12.24266895238567, -23.07032500287172],
    ]
)


def _lut() -> np.ndarray:
    t = np.linspace(0.0, 1.0, 256)[:, None]
    rgb = sum(c[None, :] * t**i for i, c in enumerate(_INFERNO))
    return np.clip(np.round(rgb * 255), 0, 255).astype(np.uint8)  # (256, 3)


LUT = _lut()


def budget_heatmap(budget_map: np.ndarray, k_max: float | None = None) -> np.ndarray:
    """(H, W) budgets (key regions attended per pixel) -> uint8 (H, W, 3) inferno colours.

    0 maps to black, ``k_max`` (default: the map's maximum) to pale yellow, so maps with the same
    ``k_max`` are comparable across images. NaNs count as 0.
    """
    return LUT[budget_levels(budget_map, k_max)]


def budget_levels(budget_map: np.ndarray, k_max: float | None = None) -> np.ndarray:
    """(H, W) budgets -> uint8 (H, W) colour levels, 0..255 (:func:`budget_heatmap` is ``LUT[levels]``):
    a third of the heat map's bytes, for keeping a map to colour later."""
    b = np.asarray(budget_map, dtype=np.float32)
    if b.ndim != 2:
        raise ValueError(f"budget map must be (H, W), got shape {b.shape}")
    b = np.nan_to_num(b, nan=0.0, posinf=0.0, neginf=0.0)
    top = float(k_max) if k_max is not None else float(b.max(initial=0.0))
    if top <= 0:
        return np.zeros(b.shape, np.uint8)
    return np.clip(np.round(b / top * 255), 0, 255).astype(np.uint8)
