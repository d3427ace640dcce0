"""One forward of the network over a list of tiles: the tensor work of a pass.

(h, w, C) float32 tiles in, ((s*h, s*w, C) float32 in [0, 1], budget (h, w) or None) out. Gray (and
alpha run through the model) goes through the RGB network as three equal channels and is averaged
back; ``tta`` averages the 8 flips/rotations (:mod:`sr.inference.ensemble`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from ..models import SRNet
from .ensemble import self_ensemble
from .errors import StopCheck, UpscaleCancelled, UpscaleError
from .tiling import TileGrid, min_tile

# What runs a network: the net itself, or its torch.compile'd wrapper; (x) or (x, aux).
Forward = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Loaded:
    """A network as the engine runs it."""

    net: SRNet
    name: str
    scale: int
    align: int  # tile starts are multiples of this (attention stride x region/window)
    channels: int
    dtype: torch.dtype  # what the network runs in (sr.inference.precision)
    forward: Forward | None = None  # the net itself, or its torch.compile'd wrapper
    own: bool = True  # one of sr's own networks (TileGrid.measured)

    @property
    def grid(self) -> TileGrid:
        return TileGrid(self.scale, self.align, self.channels, self.dtype, self.own)


def is_oom(e: BaseException) -> bool:
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(e, oom) or (isinstance(e, RuntimeError) and "out of memory" in str(e).lower())


R = TypeVar("R")


def halving_tile_on_oom(
    attempt: Callable[[int | None], R], tile: int | None, longest: int, overlap: int, align: int,
    device: torch.device,
) -> R:
    """``attempt(tile)``; where a GPU runs out of memory, the whole attempt again with half the tile
    (aligned; None, the whole input of ``longest`` side, halves too) until it fits, and UpscaleError
    once the tile would be smaller than ``overlap`` allows. Other errors, and any on a CPU, propagate."""
    while True:
        try:
            return attempt(tile)
        except (RuntimeError, MemoryError) as e:
            if device.type not in ("cuda", "mps") or not is_oom(e):
                raise
            if device.type == "cuda" and torch.cuda.is_initialized():
                torch.cuda.empty_cache()  # give the failed attempt's blocks back before retrying
            smaller = (tile or longest) // 2 // align * align
            if smaller < min_tile(overlap, align):
                raise UpscaleError(f"out of {device.type} memory even with tile {tile}") from None
            tile = smaller


def nearest_resize(a: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    h, w = a.shape
    rows = np.minimum(((np.arange(out_h) + 0.5) * h / out_h).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(out_w) + 0.5) * w / out_w).astype(np.int64), w - 1)
    return a[rows[:, None], cols[None, :]]


def _batch(arrs: list[np.ndarray], align: int, shape_bucket: int | None) -> np.ndarray:
    """(B, C, H, W): with a shape bucket the tiles padded (edge replication, bottom/right) to one
    shape, a multiple of the bucket; without one (CPU) a single tile at its exact size."""
    sizes = [a.shape[:2] for a in arrs]
    if shape_bucket:
        step = math.lcm(shape_bucket, align)
        hb = -(-max(h for h, _ in sizes) // step) * step
        wb = -(-max(w for _, w in sizes) // step) * step
        arrs = [np.pad(a, ((0, hb - a.shape[0]), (0, wb - a.shape[1]), (0, 0)), mode="edge") for a in arrs]
    elif len(arrs) > 1:
        raise ValueError("several tiles per forward need a shape bucket")
    return np.ascontiguousarray(np.stack(arrs).transpose(0, 3, 1, 2))


def run_tiles(
    loaded: Loaded, arrs: list[np.ndarray], device: torch.device, memory_format: torch.memory_format,
    shape_bucket: int | None, want_budget: bool, tta: bool = False, should_stop: StopCheck | None = None,
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """[(h, w, C) float32] -> [((s*h, s*w, C) float32 in [0, 1], budget (h, w) or None)], one forward;
    outputs cropped back from the bucketed shape."""
    c = arrs[0].shape[2]
    sizes = [a.shape[:2] for a in arrs]
    x = torch.from_numpy(_batch(arrs, loaded.align, shape_bucket))  # (B, C, H, W)
    if c == 1:
        x = x.expand(-1, 3, -1, -1)  # gray (or alpha) through the RGB model, averaged back below
    x = x.to(device=device, dtype=loaded.dtype)

    def net(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        # Checked before every forward (each tile batch, ensemble view and pass): the finest point
        # at which a running torch call can be abandoned.
        if should_stop is not None and should_stop():
            raise UpscaleCancelled("upscaling cancelled")
        t = t.contiguous(memory_format=memory_format)
        aux: dict | None = {} if want_budget else None
        y = loaded.forward(t, aux) if aux is not None else loaded.forward(t)  # (B, 3, sH, sW)
        if aux is None or not aux.get("budget_maps"):
            return y, None
        maps = torch.cat([m.float() for m in aux["budget_maps"]], dim=1)  # (B, n_blocks, H, W)
        return y, maps.mean(dim=1, keepdim=True)

    y, budget_map = self_ensemble(net, x) if tta else net(x)
    y = y.float().clamp_(0, 1)
    if c == 1:
        y = y.mean(dim=1, keepdim=True)
    out = y.permute(0, 2, 3, 1).cpu().numpy()  # (B, sH, sW, C)
    budgets = None if budget_map is None else budget_map[:, 0].cpu().numpy()
    s = loaded.scale
    return [
        (out[i, : s * h, : s * w], None if budgets is None else budgets[i, :h, :w])
        for i, (h, w) in enumerate(sizes)
    ]
