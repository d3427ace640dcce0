"""Overlapping tiles with feathered blending, so any image size runs in bounded memory.

Each axis is cut into tiles of at most ``tile`` input pixels that overlap their neighbours by
``overlap`` pixels. Tile starts are multiples of ``align`` (the model's attention grid: stride x
region), so a tile's attention regions line up with the regions the whole image would use. Inside an
overlap the two tiles' outputs are cross-faded with a linear ramp whose weights sum to exactly one,
so the result needs no normalisation pass and shows no seam. The ramp spans the central half of the
overlap: the outer quarters, where a tile lacks context, get little or no weight. Only pairs of tiles
overlap (never three along one axis), which keeps the weights a partition of unity in 2-D as a
product of 1-D ones.

Tiles run in row-major order, so an integer (8- or 16-bit) output is written one finished tile row
at a time: only a band of float32 rows is ever held, not a full-size float32 image.

How a family engine cuts one pass (:class:`TilePolicy`): the tile side from :func:`tile_for` (the
caller's size, or "auto" from the memory free now and, on a CPU, each size's measured speed). The
overlap is the engine's for sr's own networks; a model of another architecture gets the overlap its
measured receptive field needs (:mod:`sr.external.receptive`), so its tiles are seam-free, narrowed
again where the caller's own tile size leaves no room for it. The policy sits beside the plan it
chooses from, so one pass's cut reads in one file; :meth:`TilePolicy.run_pass` cuts and runs a pass,
with half the tile again where a GPU runs out of memory (:func:`halving_tile_on_oom`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from ..cpu import cpu_bf16_kind
from ..descriptor import ModelDescriptor
from ..io import quantize
from . import devices
from .errors import UpscaleError

# A model run on one tile: (h, w, C) float32 -> ((s*h, s*w, C) float32, budget (h, w) float32 or None).
TileFn = Callable[[np.ndarray], tuple[np.ndarray, "np.ndarray | None"]]
# The same on several tiles in one call (a batch on a GPU): a list in, a list of results out.
BatchTileFn = Callable[[list[np.ndarray]], list[tuple[np.ndarray, "np.ndarray | None"]]]
# Fraction of each overlap used for the cross-fade (0 = hard cut at its middle, 1 = linear across
# all of it); 0.5 measured best or tied on trained and random models (docs/benchmarks.md, `sr bench upscale`).
BLEND_RAMP = 0.5


def _align_up(x: int, align: int) -> int:
    return -(-x // align) * align


def min_tile(overlap: int, align: int) -> int:
    """The smallest tile for which a plan exists: steps of at least the (aligned) overlap between
    tile starts, so that only neighbouring tiles overlap."""
    return max(overlap + align + 2 * max(_align_up(overlap, align), align), 16)


def plan_axis(length: int, tile: int | None, overlap: int, align: int = 1) -> list[tuple[int, int]]:
    """[(start, end)] tiles covering [0, length): aligned starts, neighbours overlapping by ``overlap``.

    The fewest tiles of at most ``tile`` pixels, all the same size with a common aligned step; the
    last tile is moved left to (nearly) full size where it can, since a sliver would see too little
    context, so it may overlap its neighbour by more than ``overlap``.
    """
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    if not tile or length <= tile:
        return [(0, length)]
    if tile < min_tile(overlap, align):
        need = min_tile(overlap, align)
        raise ValueError(f"tile {tile} is too small for overlap {overlap} (need >= {need})")
    n = 2
    while (step := _align_up(-(-(length - overlap) // n), align)) + overlap > tile:
        n += 1
    size = step + overlap
    starts = [i * step for i in range(n)]
    while len(starts) > 1 and starts[-2] + size >= length:  # rounding up left a tile with nothing new
        starts.pop()
    if len(starts) > 1:
        prev = starts[-2]
        lowest = _align_up(starts[-3] + size, align) if len(starts) > 2 else prev + align  # pairwise only
        starts[-1] = max(min(starts[-1], _align_up(length - size, align)), lowest, prev + align)
    return [(s, s + size) for s in starts[:-1]] + [(starts[-1], length)]


def relative_cost(side: float, costs: Mapping[int, float]) -> float:
    """A tile's time per pixel at ``side`` (the square root of its area), interpolated linearly in a
    table of {tile side: time per pixel}; clamped to the table's ends outside it."""
    sides = sorted(costs)
    return float(np.interp(side, sides, [costs[s] for s in sides]))  # np.interp clamps at the ends


def plan_cost(
    h: int, w: int, tile: int | None, overlap: int, align: int, costs: Mapping[int, float]
) -> float:
    """Estimated time of an h x w input cut into ``tile`` (None: whole): each tile's pixels times the
    per-pixel cost of its size, so the recomputed overlap and the edge tiles count."""
    rows, cols = plan_axis(h, tile, overlap, align), plan_axis(w, tile, overlap, align)
    return sum((b - a) * (d - c) * relative_cost(math.sqrt((b - a) * (d - c)), costs)
               for a, b in rows for c, d in cols)


# A smaller tile (or tiling at all) must be estimated this much faster than the larger choice to
# replace it: the tables' entries moved by ~0.05 between runs, end to end the job's time moved less
# than that with the tile size, and every extra seam changes the output a little.
TILE_MIN_GAIN = 0.05


def fastest_tile(
    h: int, w: int, limit: int, overlap: int, align: int, costs: Mapping[int, float]
) -> int | None:
    """The tile (None: the whole image) by :func:`plan_cost`, among the table's sizes and ``limit``
    itself (aligned down), none larger than ``limit`` (the memory bound). From the whole image down,
    a smaller tile wins only when it is estimated :data:`TILE_MIN_GAIN` faster than the best so far."""
    floor = min_tile(overlap, align)
    sizes = {max(t // align * align, floor) for t in (*costs, limit)}
    candidates: list[int | None] = sorted((t for t in sizes if t <= max(limit, floor)), reverse=True)
    if h <= limit and w <= limit:
        candidates.insert(0, None)  # whole: exact, no seams
    best, best_cost = candidates[0], plan_cost(h, w, candidates[0], overlap, align, costs)
    for t in candidates[1:]:
        cost = plan_cost(h, w, t, overlap, align, costs)
        if cost < best_cost * (1 - TILE_MIN_GAIN):
            best, best_cost = t, cost
    return best


# -- the auto tile: how large a tile the engine cuts when tile="auto" ----------------------------
# Peak activation bytes per input pixel of a tile, per (channel x dtype byte): ru_maxrss of whole-image
# asa-base-x2 runs on CPU measured 5.4-7.9 (256-768 px squares); 12 leaves headroom. The auto tile
# keeps one tile's activations within a fraction of the free memory.
ACTIVATION_BYTES_PER_CHANNEL_PX = 12
AUTO_TILE_MEMORY_FRACTION = {"cpu": 0.25, "mps": 0.25, "cuda": 0.5}
# CPU: 512 px, not more. A 512 px tile of asa-base-x2 holds ~290 MB of fp32 activations (VmHWM), a
# 1024 px one ~1.2 GB; with 512 a 4000x3000 photo to x2 stays within 1 GB of peak RSS (input,
# 8-bit output canvas, one band of tile rows, one tile), and the overlap recomputed costs ~3% more.
# Within this bound the CPU's auto tile follows measured speed (CPU_TILE_COST below).
AUTO_TILE_MAX = {"cpu": 512, "mps": 1024, "cuda": 2048}
# CPU speed by tile size: the network's time per input pixel of a square tile, relative to the
# fastest size, per precision, the mean over asa-base-x2, asa-base-x4 and photo-x2 of each model's
# own ratios. Big tiles are slower per pixel (their activations fall out of the caches), small ones
# recompute more overlap and pay more per-forward overhead; the auto tile takes the plan of least
# estimated time (pixels x this cost, overlap and edge tiles included) within the memory bound.
# One table per kind of CPU (sr.cpu.cpu_bf16_kind), each measured on such a machine with one
# thread, CPU time, medians of 3 interleaved rounds, each size over the same 512^2 photograph:
#   python -m research.tile_speed --precision bf16 --rounds 3 --json bf16-1.json
#   python -m research.tile_speed --models asa-base-x2 --precision fp32 --rounds 3 --json fp32-a1.json
#   (and the same for asa-base-x4 and photo-x2), then python -m research.tile_speed --merge *.json
# "amx": the 2-core AMX Xeon beside two training runs, three bf16 runs and two fp32 runs per model,
# merged; single runs moved single entries by up to ~0.3 (fp32 photo-x2); 512 was the slowest in
# every run. "emulated": the 2-core AMD EPYC Zen 3 (AVX2, no AVX-512) beside a training run, fp32
# (bf16 cannot run there). AVX-512 BF16 CPUs without AMX (Zen 4/5) were not measured: they take the
# AMX Xeon's table, the other AVX-512 machine. End to end the tile size changed a job's CPU time by
# less than the machines' noise (docs/inference.md).
CPU_TILE_COST: dict[str, dict[torch.dtype, dict[int, float]]] = {
    "amx": {
        torch.bfloat16: {128: 1.057, 192: 1.054, 256: 1.0, 384: 1.052, 512: 1.205},
        torch.float32: {128: 1.0, 192: 1.025, 256: 1.044, 384: 1.152, 512: 1.332},
    },
    "emulated": {  # one fp32 run of the three models (2026-12-07)
        torch.float32: {128: 1.075, 192: 1.064, 256: 1.005, 384: 1.124, 512: 1.335},
    },
}
# The static attention path scores every pooled region against every other (N^2 per tile), so its
# auto tile stays smaller: 768 px at stride 2 and 4x4 regions is N = 2304, 21 MB of scores per image.
AUTO_TILE_MAX_STATIC = 768
# Models of other architectures (TileGrid.measured False): the memory estimate alone decides, up to this.
AUTO_TILE_MAX_OUTSIDE = 4096


class TileTooSmall(ValueError):
    """A fixed tile size under the smallest one a plan exists for (:func:`tile_for`)."""


def cpu_tile_cost(dtype: torch.dtype) -> dict[int, float] | None:
    """This CPU's measured tile table for ``dtype`` (:data:`CPU_TILE_COST`), or None where none was
    measured (the auto tile then takes the largest tile memory allows)."""
    return CPU_TILE_COST.get(cpu_bf16_kind(), CPU_TILE_COST["amx"]).get(dtype)


@dataclass(frozen=True)
class TileGrid:
    """What the tile policy needs of one pass's network (all known from its descriptor)."""

    scale: int
    align: int  # tile starts are multiples of this (attention stride x region/window)
    channels: int
    dtype: torch.dtype  # what the network runs in
    # sr's own networks: the measured speed table and the CPU's 512 px cap (1 GB for a 12 MP photo)
    # apply. A model of another architecture takes the largest tile its memory estimate allows:
    # nobody measured its speed by tile size, and every seam it could show is avoided where it runs whole.
    measured: bool = True


def auto_tile_limit(grid: TileGrid, device_type: str, free_bytes: float, static_attention: bool) -> int:
    """The largest tile side whose activations fit the auto tile's share of ``free_bytes`` (and the
    device's cap; smaller on the static attention path)."""
    dtype_bytes = torch.finfo(grid.dtype).bits // 8
    per_px = ACTIVATION_BYTES_PER_CHANNEL_PX * grid.channels * dtype_bytes
    per_px += 3 * grid.scale**2 * 4 * 2  # the tile's output and its weighted copy
    budget = AUTO_TILE_MEMORY_FRACTION[device_type] * free_bytes
    cap = AUTO_TILE_MAX[device_type] if grid.measured else AUTO_TILE_MAX_OUTSIDE
    side = min(int(math.sqrt(max(budget, 0) / per_px)), cap)
    if static_attention:
        side = min(side, AUTO_TILE_MAX_STATIC)
    return side


def auto_tile(
    h: int, w: int, overlap: int, grid: TileGrid, device_type: str, free_bytes: float,
    static_attention: bool,
) -> int | None:
    """tile="auto" on an h x w input: on a CPU with a measured table the fastest plan within the
    memory bound; elsewhere the whole image when it fits the bound, else the bound (aligned)."""
    side = auto_tile_limit(grid, device_type, free_bytes, static_attention)
    costs = cpu_tile_cost(grid.dtype) if device_type == "cpu" and grid.measured else None
    if costs is not None:  # the fastest plan by measured speed, within the memory bound
        return fastest_tile(h, w, side, overlap, grid.align, costs)
    if h <= side and w <= side:
        return None  # the whole image fits: exact, and no overlap recomputed
    return max(side // grid.align * grid.align, min_tile(overlap, grid.align))


def tile_for(
    tile: int | str | None, h: int, w: int, overlap: int, grid: TileGrid, device_type: str,
    free_bytes: Callable[[], float], static_attention: bool,
) -> int | None:
    """The tile side an h x w pass cuts (None: whole) for the setting ``tile`` (a size, "auto" or
    None); :class:`TileTooSmall` when a fixed size is too small for ``overlap`` on this grid.
    ``free_bytes`` is asked only for "auto"."""
    if tile is None:
        return None
    if tile == "auto":
        return auto_tile(h, w, overlap, grid, device_type, free_bytes(), static_attention)
    assert isinstance(tile, int)
    if tile < min_tile(overlap, grid.align):
        raise TileTooSmall(
            f"tile {tile} is too small for tile_overlap {overlap} with this model "
            f"(need at least {min_tile(overlap, grid.align)})"
        )
    return tile


# -- the tile policy: the side and overlap one pass of a family engine is cut with -----------------
@dataclass(frozen=True)
class TilePolicy:
    """The engine's tiling options: ``tile`` (pixels, "auto" or None: whole), ``overlap`` (its
    tile_overlap), the device whose memory the auto tile follows, and whether attention is static."""

    tile: int | str | None
    overlap: int
    device: torch.device
    static_attention: bool

    def cut(self, desc: ModelDescriptor, grid: TileGrid, h: int, w: int) -> tuple[int | None, int]:
        """(tile side, overlap) for the pass of ``desc``'s network on an h x w input; side None: whole."""
        side = self._side(desc, grid, h, w)
        return side, self._pass_overlap(desc, side, h, w)

    def run_pass(
        self, pixels: np.ndarray, desc: ModelDescriptor, grid: TileGrid, run_many: BatchTileFn, batch: int,
        want_budget: bool, out_dtype: type, progress: ProgressFn | None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """One pass of ``desc``'s network (``run_many`` on a list of tiles) over (H, W, C) ``pixels``: cut
        by :meth:`cut`, run by :func:`run_tiled` (``batch`` tiles per call where it is over 1); a GPU
        out of memory: the whole pass again with half the tile (the plan changes)."""
        h, w = pixels.shape[:2]
        tile, overlap = self.cut(desc, grid, h, w)

        def attempt(tile: int | None) -> tuple[np.ndarray, np.ndarray | None]:
            return run_tiled(pixels, lambda a: run_many([a])[0], grid.scale, tile, overlap, grid.align,
                             want_budget, run_many=run_many if batch > 1 else None, batch=batch,
                             out_dtype=out_dtype, progress=progress)

        return halving_tile_on_oom(attempt, tile, max(h, w), overlap, grid.align, self.device)

    def _side(self, desc: ModelDescriptor, grid: TileGrid, h: int, w: int) -> int | None:
        if self.tile == "auto" and desc.tiling != "supported":
            return None  # spandrel advises against tiling this model (global context, or its own tiles)

        def side_for(overlap: int) -> int | None:
            try:
                return tile_for(self.tile, h, w, overlap, grid, self.device.type,
                                lambda: devices.available_memory(self.device), self.static_attention)
            except TileTooSmall as e:
                raise UpscaleError(str(e)) from None

        side = side_for(self.overlap)
        if desc.arch is None or side is None or side >= max(h, w):
            return side  # sr's own overlap, or one tile: no overlap to widen (nothing is measured)
        return side_for(self._pass_overlap(desc, side, h, w))

    def _pass_overlap(self, desc: ModelDescriptor, side: int | None, h: int, w: int) -> int:
        """The overlap of a pass that ``side`` cuts into several tiles; the engine's where it runs whole
        (no overlap is used, and an outside model's radius is not measured)."""
        if side is None or side >= max(h, w):
            return self.overlap
        wide = self._suited_overlap(desc)
        if isinstance(self.tile, int):  # the caller's tile size: widen only as far as it allows
            while wide > self.overlap and min_tile(wide, desc.align) > self.tile:
                wide -= 1
        return wide

    def _suited_overlap(self, desc: ModelDescriptor) -> int:
        """The engine's overlap for sr's own networks; for another architecture, widened to what its
        measured receptive field needs (measured once per file)."""
        if desc.arch is None:
            return self.overlap
        from ..external.receptive import suited_overlap  # sr.external serves outside models only

        return suited_overlap(desc, self.overlap)


def axis_weights(spans: list[tuple[int, int]], i: int, scale: int, ramp: float = BLEND_RAMP) -> np.ndarray:
    """Blend weights of tile ``i`` along one axis, at output resolution (``scale`` x its input span).

    In the overlap [a, b) with the next tile the weight falls from 1 to 0 over the central ``ramp``
    fraction of the overlap (1 = a linear cross-fade across all of it, 0 = a hard cut at its middle);
    the next tile gets exactly 1 minus that. Weights are evaluated at output pixel centres.
    """
    start, end = spans[i]
    centres = (np.arange(start * scale, end * scale, dtype=np.float64) + 0.5) / scale  # input coords
    w = np.ones_like(centres)

    def rise(a: int, b: int) -> np.ndarray:  # 0 before the ramp, 1 after it
        mid, half = (a + b) / 2, ramp * (b - a) / 2
        if half <= 0:
            return (centres >= mid).astype(np.float64)
        return np.clip((centres - (mid - half)) / (2 * half), 0.0, 1.0)

    if i > 0:
        w *= rise(spans[i][0], spans[i - 1][1])
    if i + 1 < len(spans):
        w *= 1.0 - rise(spans[i + 1][0], spans[i][1])
    return w.astype(np.float32)


# Called after each tile is blended in: (tiles done, tiles in the plan).
ProgressFn = Callable[[int, int], None]


class _Canvas:
    """Where blended tiles land, one tile row (band) at a time.

    A float32 output is accumulated in place. An integer output (uint8/uint16 samples) gets a float32
    band as tall as one tile row: when a row's tiles are all in, the band's rows that no later tile
    touches are quantized into the output and the overlap with the next row is carried over. The sums
    are the same additions in the same order as in place, so the samples equal quantizing the float
    output, in a band's memory instead of a full-size float32 image.
    """

    def __init__(
        self, rows: list[tuple[int, int]], width: int, channels: int, scale: int, dtype: type
    ) -> None:
        self.rows, self.scale = rows, scale
        shape = (rows[-1][1] * scale, width * scale, channels)
        self.dtype = np.dtype(dtype)
        self.in_place = self.dtype == np.float32
        if self.in_place:
            self.out = np.zeros(shape, dtype=np.float32)
            self.buf = self.out
        else:
            self.out = np.empty(shape, dtype=self.dtype)
            height = max(b - a for a, b in rows) * scale
            self.buf = np.zeros((height, *shape[1:]), dtype=np.float32)
        self.row = 0  # the tile row the band holds

    def band(self, i: int) -> np.ndarray:
        """Tile row ``i``'s output rows (call with non-decreasing ``i``)."""
        while self.row < i:
            self.finish(self.row)
            self.row += 1
        y0, y1 = self.rows[i]
        if self.in_place:
            return self.out[y0 * self.scale : y1 * self.scale]
        return self.buf[: (y1 - y0) * self.scale]

    def finish(self, i: int) -> None:
        """Row ``i`` is complete: write out what no later row overlaps, keep the rest for row i + 1."""
        if self.in_place:
            return
        s, (y0, y1) = self.scale, self.rows[i]
        end = self.rows[i + 1][0] if i + 1 < len(self.rows) else y1
        done = (end - y0) * s
        self.out[y0 * s : end * s] = quantize(self.buf[:done], self.dtype, scratch=True)  # zeroed below
        carry = self.buf[done : (y1 - y0) * s].copy()  # the overlap: a few rows
        self.buf[:] = 0
        self.buf[: len(carry)] = carry

    def result(self) -> np.ndarray:
        self.band(len(self.rows) - 1)
        self.finish(len(self.rows) - 1)
        return self.out


def _blend(dest: np.ndarray, tile: np.ndarray, wy: np.ndarray, wx: np.ndarray) -> None:
    """``dest += tile * (wy x wx)``, the multiply skipped where both weights are 1 (a rectangle: the
    tile's interior, most of it). x * 1 == x exactly, so the sums are the same to the bit."""
    (ya, yb), (xa, xb) = (((int(k[0]), int(k[-1]) + 1) if k.size else (0, 0))
                          for k in (np.flatnonzero(wy == 1), np.flatnonzero(wx == 1)))
    for r, c in ((slice(0, ya), slice(None)), (slice(yb, None), slice(None)),
                 (slice(ya, yb), slice(0, xa)), (slice(ya, yb), slice(xb, None))):  # the ramps
        dest[r, c] += tile[r, c] * (wy[r, None] * wx[None, c])[:, :, None]
    dest[ya:yb, xa:xb] += tile[ya:yb, xa:xb]


def run_tiled(
    pixels: np.ndarray,
    run: TileFn,
    scale: int,
    tile: int | None,
    overlap: int,
    align: int = 1,
    want_budget: bool = False,
    ramp: float = BLEND_RAMP,
    run_many: BatchTileFn | None = None,
    batch: int = 1,
    out_dtype: type = np.float32,
    progress: ProgressFn | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Upscale (H, W, C) float32, or integer samples ``run`` converts per tile, tile by tile; returns
    ((sH, sW, C) output, budget (H, W) or None).

    The output is float32, or with ``out_dtype`` uint8/uint16 the samples :func:`sr.io.quantize`
    makes of it, assembled one tile row at a time (:class:`_Canvas`). With ``run_many``, tiles go to
    it ``batch`` at a time (one forward per batch on a GPU); the blending is the same. Memory: the
    input, the output, one band of float32 tile rows (for integer output), and one batch of tiles'
    activations. ``progress`` is called after every tile.
    """
    h, w, c = pixels.shape
    rows, cols = plan_axis(h, tile, overlap, align), plan_axis(w, tile, overlap, align)
    if len(rows) == 1 and len(cols) == 1:
        out, budget = run(pixels)
        if progress is not None:
            progress(1, 1)
        if np.dtype(out_dtype) != np.float32:
            out = quantize(out, out_dtype, scratch=True)  # the network output is ours
        return out, (budget if want_budget else None)
    canvas = _Canvas(rows, w, c, scale, out_dtype)
    budget_sum = np.zeros((h, w), dtype=np.float32) if want_budget else None
    wy_out = [axis_weights(rows, i, scale, ramp) for i in range(len(rows))]
    wx_out = [axis_weights(cols, j, scale, ramp) for j in range(len(cols))]
    spans = [(i, j) for i in range(len(rows)) for j in range(len(cols))]
    step = batch if run_many is not None else 1
    for start in range(0, len(spans), step):
        group = spans[start : start + step]
        crops = [pixels[rows[i][0] : rows[i][1], cols[j][0] : cols[j][1]] for i, j in group]
        results = run_many(crops) if run_many is not None else [run(crops[0])]
        for (i, j), (tile_out, tile_budget) in zip(group, results, strict=True):
            (y0, y1), (x0, x1) = rows[i], cols[j]
            _blend(canvas.band(i)[:, x0 * scale : x1 * scale], tile_out, wy_out[i], wx_out[j])
            if budget_sum is not None and tile_budget is not None:
                # Budgets are per attention region: cut at the overlap's middle (a region boundary when
                # starts are aligned) instead of fading, so each region shows one tile's decision.
                wb = axis_weights(rows, i, 1, 0.0)[:, None] * axis_weights(cols, j, 1, 0.0)[None, :]
                budget_sum[y0:y1, x0:x1] += tile_budget * wb
        if progress is not None:
            progress(start + len(group), len(spans))
    return canvas.result(), budget_sum


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
