"""Geometric self-ensemble: exact for equivariant maps, an average of the 8 views otherwise."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sr.inference.ensemble import TRANSFORMS, forward_view, inverse_view, self_ensemble


def test_the_eight_transforms_are_distinct_and_invertible():
    x = torch.arange(2 * 3 * 5 * 7, dtype=torch.float32).view(2, 3, 5, 7)
    views = [forward_view(x, t, f) for t, f in TRANSFORMS]
    assert len({tuple(v.flatten().tolist()) for v in views}) == 8
    for (t, f), v in zip(TRANSFORMS, views, strict=True):
        assert torch.equal(inverse_view(v, t, f), x)


def test_an_equivariant_map_is_unchanged_and_its_side_map_lines_up():
    x = torch.rand(1, 3, 6, 9)

    def nearest_x2(t):  # exactly equivariant to flips and rotations
        return F.interpolate(t, scale_factor=2, mode="nearest"), t[:, :1]

    y, side = self_ensemble(nearest_x2, x)
    torch.testing.assert_close(y, nearest_x2(x)[0])
    torch.testing.assert_close(side, x[:, :1])  # the budget-map role: back in the input's frame


def test_a_position_dependent_map_is_averaged_over_the_views():
    x = torch.zeros(1, 1, 4, 6)

    def add_column_ramp(t):  # not equivariant: adds the column index of the transformed view
        return t + torch.arange(t.shape[-1], dtype=t.dtype), None

    y, side = self_ensemble(add_column_ramp, x)
    assert side is None
    manual = sum(inverse_view(add_column_ramp(forward_view(x, t, f))[0], t, f) for t, f in TRANSFORMS) / 8
    torch.testing.assert_close(y, manual)
    # Averaged over flips and turns, the ramp becomes symmetric: the same at mirrored pixels.
    torch.testing.assert_close(y, y.flip(-1))
    torch.testing.assert_close(y, y.flip(-2))
