"""The passes of an upscale and the tensor work of each.

:func:`run_tiles` is one forward of the network over a list of tiles: (h, w, C) float32 tiles (or
integer samples) in, ((s*h, s*w, C) float32 in [0, 1], budget (h, w) or None) out. Gray (and alpha
run through the model) goes through the RGB network as three equal channels and is averaged back;
``tta`` averages the 8 flips/rotations (:mod:`sr.inference.ensemble`). :class:`PassChain` runs a
whole upscale's passes in order (the pre model, the scale passes, alpha's), each cut and blended by
:meth:`~sr.inference.tiling.TilePolicy.run_pass`, so one image goes down once and comes back once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..descriptor import ModelDescriptor
from ..io import to_float
from ..models import SRNet
from .ensemble import self_ensemble
from .errors import StopCheck, UpscaleCancelled
from .precision import precision_name
from .tiling import BatchTileFn, ProgressFn, TileGrid, TilePolicy

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


def _batch(arrs: list[np.ndarray], align: int, shape_bucket: int | None) -> np.ndarray:
    """(B, C, H, W) float32: with a shape bucket the tiles padded (edge replication, bottom/right) to
    one shape, a multiple of the bucket; without one (CPU) a single tile at its exact size. Tiles of
    integer samples (a decoded file's, kept as integers until cut) become float32 here, tile by tile:
    the floats converting the whole image would give, in a tile's memory instead of the image's."""
    sizes = [a.shape[:2] for a in arrs]
    if shape_bucket:
        step = math.lcm(shape_bucket, align)
        hb = -(-max(h for h, _ in sizes) // step) * step
        wb = -(-max(w for _, w in sizes) // step) * step
        arrs = [np.pad(a, ((0, hb - a.shape[0]), (0, wb - a.shape[1]), (0, 0)), mode="edge") for a in arrs]
    elif len(arrs) > 1:
        raise ValueError("several tiles per forward need a shape bucket")
    batch = np.ascontiguousarray(np.stack(arrs).transpose(0, 3, 1, 2))
    return to_float(batch) if batch.dtype.kind in "ui" else batch


def run_tiles(
    loaded: Loaded, arrs: list[np.ndarray], device: torch.device, memory_format: torch.memory_format,
    shape_bucket: int | None, want_budget: bool, tta: bool = False, should_stop: StopCheck | None = None,
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """[(h, w, C) float32 or uint8/uint16 samples] -> [((s*h, s*w, C) float32 in [0, 1], budget (h, w)
    or None)], one forward; outputs cropped back from the bucketed shape."""
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


@dataclass(frozen=True)
class _Step:
    """One pass of a chain: the network of ``scale`` (None: the pre model) over the colour plane, or
    over the alpha plane."""

    scale: int | None
    alpha: bool = False
    want_budget: bool = False
    out_dtype: type = np.float32
    progress: ProgressFn | None = None


@dataclass(frozen=True)
class Chained:
    """What a chain of passes made: the colour output, the alpha one (None where alpha did not run
    through the model), the colour passes' budget maps, and each colour pass's network name and
    number type (the pre model's first)."""

    pixels: np.ndarray
    alpha: np.ndarray | None
    budget_maps: list[np.ndarray]
    names: list[str]
    precisions: list[str]


@dataclass(frozen=True)
class PassChain:
    """Runs an upscale's passes one after the other: the pre model's (colour only), the scale passes,
    then the same scale passes on alpha. ``network(scale, pixels)``: the network a pass runs on an
    input of ``pixels`` (scale None: the pre model), loaded on first use; ``descriptor(scale)``: its
    file (1: the pre model's). ``tiles`` cuts each pass when it comes, after its network is loaded,
    so that the auto tile follows the memory free then."""

    tiles: TilePolicy
    network: Callable[[int | None, int], Loaded]
    descriptor: Callable[[int], ModelDescriptor]
    device: torch.device
    memory_format: torch.memory_format
    shape_bucket: int | None
    tile_batch: int

    def run_passes(
        self, pixels: np.ndarray, alpha: np.ndarray | None, passes: list[int], pre: bool, want_budget: bool,
        tta: bool, should_stop: StopCheck | None, out_dtype: type, progress: ProgressFn | None,
    ) -> Chained:
        """(H, W, 3) float32 ``pixels`` (or uint8/uint16 samples, converted tile by tile), and the (H, W)
        float32 ``alpha`` where it runs through the model (else None), through the chain (``pre``: the
        pre model first). The last colour pass writes
        ``out_dtype``; a pass that feeds another writes float32."""
        steps = [_Step(None, progress=progress)] if pre else []
        last = len(passes) - 1
        steps += [_Step(s, False, want_budget, out_dtype if n == last else np.float32, progress)
                  for n, s in enumerate(passes)]
        steps += [_Step(s, alpha=True) for s in passes] if alpha is not None else []
        colour, alpha_plane = pixels, None if alpha is None else alpha[:, :, None]  # alpha as (H, W, 1)
        batch = self.tile_batch if self.tile_batch > 1 and self.shape_bucket else 1
        maps, names, precisions = [], [], []
        for step in steps:
            src = alpha_plane if step.alpha else colour
            assert src is not None  # alpha steps exist only where alpha does
            loaded = self.network(step.scale, src.shape[0] * src.shape[1])
            forward = self._forward(loaded, step.want_budget, tta, should_stop)
            out, budget = self.tiles.run_pass(
                src, self.descriptor(loaded.scale), loaded.grid, forward, batch, step.want_budget,
                step.out_dtype, step.progress)
            if step.alpha:
                alpha_plane = out
            else:
                colour = out
                names.append(loaded.name)
                precisions.append(precision_name(loaded.dtype))
            if budget is not None:
                maps.append(budget)
        return Chained(colour, None if alpha_plane is None else alpha_plane[:, :, 0], maps, names, precisions)

    def _forward(
        self, loaded: Loaded, want_budget: bool, tta: bool, should_stop: StopCheck | None
    ) -> BatchTileFn:
        """:func:`run_tiles` of ``loaded`` as a pass's tile plan calls it: tiles in, their results out."""

        def run_many(arrs: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray | None]]:
            return run_tiles(loaded, arrs, self.device, self.memory_format, self.shape_bucket, want_budget,
                             tta, should_stop)

        return run_many
