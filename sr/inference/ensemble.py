"""Geometric self-ensemble (``--tta``): run the network on the 8 flips/rotations and average.

SR networks are not exactly equivariant to flips and 90-degree rotations, so averaging the 8
back-transformed outputs cancels part of each one's error (Lim et al., EDSR+). It costs 8 forward
passes; the gain for the shipped weights is in the README's results table and the model card.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# (quarter turns, horizontal flip): the dihedral group of the square, identity first
TRANSFORMS: tuple[tuple[int, bool], ...] = tuple((r, f) for r in range(4) for f in (False, True))

MapFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]


def forward_view(x: torch.Tensor, turns: int, flip: bool) -> torch.Tensor:
    """One of the 8 dihedral views of x (..., H, W): rotated ``turns`` quarter turns, then flipped."""
    x = torch.rot90(x, turns, dims=(-2, -1)) if turns else x
    return x.flip(-1) if flip else x


def inverse_view(y: torch.Tensor, turns: int, flip: bool) -> torch.Tensor:
    """:func:`forward_view` undone."""
    y = y.flip(-1) if flip else y
    return torch.rot90(y, -turns, dims=(-2, -1)) if turns else y


def self_ensemble(fn: MapFn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Average ``fn`` over the 8 transforms of ``x`` (B, C, H, W).

    ``fn`` maps an input to (output (B, C', sH, sW), optional per-pixel map (B, 1, H', W') or None);
    both are transformed back before averaging, so a budget map still lines up with the image.
    """
    out_sum: torch.Tensor | None = None
    map_sum: torch.Tensor | None = None
    for turns, flip in TRANSFORMS:
        y, extra = fn(forward_view(x, turns, flip))
        y = inverse_view(y.float(), turns, flip)
        out_sum = y if out_sum is None else out_sum + y
        if extra is not None:
            extra = inverse_view(extra.float(), turns, flip)
            map_sum = extra if map_sum is None else map_sum + extra
    assert out_sum is not None
    n = len(TRANSFORMS)
    return out_sum / n, (map_sum / n if map_sum is not None else None)
