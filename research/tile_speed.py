"""``python -m research.tile_speed``: how fast the engine runs per pixel at each tile size.

For each model, precision and square LR tile size it times the engine's own per-tile step
(:meth:`sr.inference.engine.Upscaler.tile_runner`: float32 tile in, network in the run's precision,
float32 output back) over the same 512 x 512 photograph (skimage's astronaut) at every tile size: the
picture is covered by the fewest tiles of that size (the last one moved inside, so 192 and 384 cover
some pixels twice), since the adaptive attention spends by content and a centre crop per size would
time different content. Every configuration runs once per round, rounds interleaved (the order
reversed every other round) so the load of other processes falls on all of them alike, each
configuration's turn starting with one untimed call (a job runs one tile size over and over, so
its first call after another size's is not what a job pays); CPU-time medians with ``--clock cpu``
(the default; use it with ``--threads 1``).

Printed per row: ms per tile, microseconds per input pixel of a tile (what the engine's auto tile
table holds, :data:`sr.inference.tiling.CPU_TILE_COST`), and the seconds per output megapixel
of a whole ``--image-size`` job cut into that tile (overlap recomputed, edge tiles counted).

With ``--overlaps 8,16,32`` the same job's time is also estimated at each overlap: the plan's tiled
input pixels (overlaps counted twice) times the size's us/px.

Then the relative table the engine holds: per precision, each model's us/px divided by its own
fastest size, averaged over the models (``--merge`` prints it from the JSON of several runs):

    python -m research.tile_speed --precision bf16 --rounds 3 --json bf16.json
    python -m research.tile_speed --models asa-base-x2 --precision fp32 --rounds 3 --json fp32-a.json
    ...
    python -m research.tile_speed --merge bf16.json fp32-a.json fp32-b.json fp32-c.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.cost import DEFAULT_MODELS, PRECISIONS, int_list, load_picture
from benchmarks.tooling import set_threads, write_json
from sr.errors import CLIError
from sr.inference.tiling import min_tile, plan_axis
from sr.request import DEFAULT_TILE_OVERLAP

from ._script import run_script


@dataclass
class TileRow:
    model: str
    precision: str
    tile: int
    ms_per_tile: float  # median over rounds of the mean over the covering tiles
    us_per_px: float  # per input pixel of the tile
    s_per_out_mp: float  # a whole --image-size job in this tile, per output megapixel


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated model names")
    p.add_argument("--precision", default=",".join(PRECISIONS), help="bf16 and/or fp32 (default both)")
    p.add_argument("--tiles", type=int_list, default=[128, 192, 256, 384, 512], help="LR tile sides")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians (default 5)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="process CPU time or wall time")
    p.add_argument("--image-size", default="4000x3000", help="WxH of the job the s/output MP is for")
    p.add_argument("--overlaps", type=int_list, default=[DEFAULT_TILE_OVERLAP],
                   help="tile overlaps to estimate that job's time at (default the engine's, 16)")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--merge", nargs="+", metavar="JSON",
                   help="measure nothing: print the relative table of these runs' JSON")


def relative_table(rows: list[TileRow]) -> dict[str, dict[int, float]]:
    """{precision: {tile: time per pixel relative to the fastest size}}, each model's own ratios
    averaged over the models (a model measured in several runs: its mean us/px per size first)."""
    by: dict[tuple[str, str], dict[int, list[float]]] = {}
    for r in rows:
        by.setdefault((r.precision, r.model), {}).setdefault(r.tile, []).append(r.us_per_px)
    ratios: dict[str, dict[int, list[float]]] = {}
    for (precision, _), per_tile in by.items():
        means = {tile: statistics.fmean(us) for tile, us in per_tile.items()}
        best = min(means.values())
        for tile, us in means.items():
            ratios.setdefault(precision, {}).setdefault(tile, []).append(us / best)
    return {p: {t: round(statistics.fmean(v), 3) for t, v in sorted(per.items())}
            for p, per in ratios.items()}


def print_table(rows: list[TileRow]) -> None:
    for precision, table in relative_table(rows).items():
        models = sorted({r.model for r in rows if r.precision == precision})
        print(f"relative time per pixel, {precision} (mean over {', '.join(models)}): {table}")


def covering(picture: torch.Tensor, tile: int) -> list[np.ndarray]:
    """(tile, tile, 3) float32 crops that cover ``picture`` (1, 3, H, W), the fewest of that size."""
    h, w = picture.shape[-2:]

    def starts(length: int) -> list[int]:
        n = -(-length // tile)
        return [0] if n == 1 else [round(i * (length - tile) / (n - 1)) for i in range(n)]

    return [picture[0, :, y : y + tile, x : x + tile].permute(1, 2, 0).contiguous().numpy()
            for y in starts(h) for x in starts(w)]


def job_tiles(width: int, height: int, tile: int, align: int) -> tuple[int, int]:
    """(tiles, output-pixel factor 1) of a width x height input cut into ``tile`` by the engine's plan."""
    rows = plan_axis(height, tile, DEFAULT_TILE_OVERLAP, align)
    cols = plan_axis(width, tile, DEFAULT_TILE_OVERLAP, align)
    return len(rows) * len(cols), width * height


def tiled_pixels(width: int, height: int, tile: int, overlap: int, align: int) -> int:
    """Input pixels the tiles of a width x height input cut into ``tile`` hold (overlaps twice)."""
    rows, cols = plan_axis(height, tile, overlap, align), plan_axis(width, tile, overlap, align)
    return sum(b - a for a, b in rows) * sum(b - a for a, b in cols)


def print_overlaps(rows: list[TileRow], aligns: dict[str, tuple[int, int]], width: int, height: int,
                   overlaps: list[int]) -> dict[str, dict[int, dict[int, float]]]:
    """Seconds per output MP of the width x height job at each tile size and overlap: the plan's tiled
    pixels times the size's measured us/px (a smaller overlap recomputes less, and shows more seams)."""
    table: dict[str, dict[int, dict[int, float]]] = {}
    print("| model | precision | tile | " + " | ".join(f"overlap {o}: s/output MP" for o in overlaps) + " |")
    print("|---|---|---|" + "---|" * len(overlaps))
    for r in rows:
        align, scale = aligns[r.model]
        per = {o: tiled_pixels(width, height, r.tile, o, align) * r.us_per_px / (width * height * scale**2)
               for o in overlaps if r.tile >= min_tile(o, align)}
        table.setdefault(f"{r.model} {r.precision}", {})[r.tile] = per
        print(f"| {r.model} | {r.precision} | {r.tile} | "
              + " | ".join(f"{per[o]:.3f}" if o in per else "too small" for o in overlaps) + " |")
    return table


def run(args: argparse.Namespace) -> int:
    from sr.inference.engine import UpscaleError, Upscaler

    if args.merge:
        rows = []
        for path in args.merge:
            try:
                rows += [TileRow(**r) for r in json.loads(Path(path).read_text())["rows"]]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise CLIError(f"--merge {path}: not a tile_speed JSON ({e})") from None
        print_table(rows)
        return 0
    if args.rounds < 1:
        raise CLIError(f"--rounds must be >= 1, got {args.rounds}")
    try:
        width, height = (int(v) for v in args.image_size.lower().split("x"))
    except ValueError:
        raise CLIError(f"--image-size must be WxH, got {args.image_size!r}") from None
    set_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    picture = load_picture(None)
    configs = []  # (model, precision, tile, fn, tile array, align, scale)
    for name in [m for m in args.models.split(",") if m]:
        for precision in [p for p in args.precision.split(",") if p]:
            try:
                up = Upscaler(name, device="cpu", precision=precision, threads=args.threads, tile=None)
                scale = up.scales[0]
                fn, align = up.tile_runner(scale)
            except UpscaleError as e:
                raise CLIError(str(e)) from None
            for tile in args.tiles:
                if tile > min(picture.shape[-2:]):
                    raise CLIError(f"--tiles {tile}: larger than the {tuple(picture.shape[-2:])} picture")
                configs.append((name, precision, tile, fn, covering(picture, tile), align, scale))
    times: list[list[float]] = [[] for _ in configs]
    with torch.inference_mode():
        for _, _, _, fn, arrs, _, _ in configs:
            fn(arrs[0])  # warm-up: kernel choice, allocator
        for r in range(args.rounds):
            order = range(len(configs)) if r % 2 == 0 else reversed(range(len(configs)))
            for i in order:
                fn, arrs = configs[i][3], configs[i][4]
                fn(arrs[0])  # untimed: the sizes take turns; a job repeats one size
                t0 = clock()
                for arr in arrs:
                    fn(arr)
                times[i].append((clock() - t0) / len(arrs))
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    rows = []
    for (name, precision, tile, _, _, align, scale), ts in zip(configs, times, strict=True):
        t = statistics.median(ts)
        n, px = job_tiles(width, height, tile, align)
        rows.append(TileRow(name, precision, tile, t * 1e3, t / tile**2 * 1e6, n * t / (px * scale**2 / 1e6)))
    print(f"| model | precision | tile | ms/tile | us/input px | s/output MP ({width}x{height}) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.model} | {r.precision} | {r.tile} | {r.ms_per_tile:.1f} | {r.us_per_px:.3f} "
              f"| {r.s_per_out_mp:.3f} |")
    print_table(rows)
    aligns = {name: (align, scale) for name, _, _, _, _, align, scale in configs}
    by_overlap = print_overlaps(rows, aligns, width, height, args.overlaps)
    if args.json:
        write_json(args.json, {"clock": args.clock, "threads": torch.get_num_threads(),
                               "rows": [asdict(r) for r in rows], "by_overlap": by_overlap})
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, "research.tile_speed")


if __name__ == "__main__":
    raise SystemExit(main())
