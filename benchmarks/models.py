"""``sr bench models``: a community model file through sr against spandrel's own call, same input.

For one model file spandrel recognises (default: Real-ESRGAN general-x4v3 in ``../shared/peers``)
and one square input (``--size`` px, default 1024: a fixed synthetic picture, or ``--image FILE``
resized), the arms are, per precision (``--precision``, default fp32 and bf16 where this CPU runs
bf16 and spandrel says the architecture does):

- ``direct``: what a script does with spandrel alone: ``ModelLoader().load_from_file(FILE)``, the
  model cast to the precision, ``descriptor(tensor)`` on a (1, 3, H, W) tensor made beforehand (the
  tensor's conversion from an image and back is not timed: the strictest baseline for sr);
- ``sr untiled`` and ``sr tile auto``: ``Upscaler(FILE, tile=0 | "auto", precision=P).upscale(image)``,
  the path of ``sr upscale`` without decoding and encoding: (H, W, 3) float32 in, float32 out;
- with ``--ours``, sr's own models (default asa-base-x4 and photo-x4) as ``sr upscale`` runs them:
  precision auto (``--ours-precision``), auto tile.

``--images DIR`` times a folder instead (every image as it is, e.g. the web JPEGs ``sr eval
--degrade web`` builds): each arm's time is the sum over the images, precision auto by default (what
``sr upscale`` picks; no direct arm unless ``--precision`` names fp32 or bf16), auto tile.

Each arm runs once untimed (a warm-up; its output gives the max abs difference to the direct call
of the same precision; ``--warmup 0`` times that first call as round 1), then ``--rounds`` rounds,
each arm once per round, the order rotated and reversed from round to round, so a load that comes
and goes slows every arm alike. Rows give the
median wall seconds, the median process CPU seconds, output MP/s at the median, and for sr's arms the
speed relative to the direct call of the same precision (direct seconds / sr seconds: 1.0 or more
means sr is at least as fast). ``--profile N`` lists each arm's N costliest torch operators over one
more call (self CPU ms): where a difference comes from.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sr.errors import CLIError

from .tooling import write_json

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "peers" / "realesr-general-x4v3.pth"
DEFAULT_OURS = "asa-base-x4,photo-x4"
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass
class Row:
    arm: str
    precision: str
    tile: str  # "whole", a side in pixels, or "-" for the direct call
    seconds: float  # median wall seconds of one call
    cpu_seconds: float  # median process CPU seconds of one call (all threads)
    mp_per_s: float  # output megapixels per median second
    speed_vs_direct: float | None  # direct seconds / these seconds (same precision); None: direct itself
    max_abs_vs_direct: float | None  # max |output - direct output| (same precision)
    rounds: list[float]  # wall seconds of each timed round


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="FILE",
                   help=f"model file spandrel recognises (default {DEFAULT_MODEL.name} in ../shared/peers)")
    p.add_argument("--size", type=int, default=1024, help="side of the square input in pixels (default 1024)")
    p.add_argument("--image", default=None, metavar="FILE",
                   help="input: this image resized (Lanczos) to --size x --size (default: a fixed synthetic "
                        "picture of gradients, edges, a grating and noise)")
    p.add_argument("--precision", default=None, metavar="LIST",
                   help="comma-separated auto,fp32,bf16 (default: fp32, and bf16 where this CPU runs it and "
                        "spandrel says the architecture supports it; auto has no direct arm)")
    p.add_argument("--tiles", default=None, metavar="LIST",
                   help="sr's tile settings to time, comma-separated (0 = untiled, auto, or pixels; "
                        "default 0,auto; with --images auto)")
    p.add_argument("--images", default=None, metavar="DIR",
                   help="instead of one square input: every image of DIR as it is (e.g. the web JPEGs "
                        "of sr eval --degrade web), each arm's time the sum over them; precision "
                        "default auto (sr's own choice) and no direct arm unless --precision names one")
    p.add_argument("--ours", default=DEFAULT_OURS, metavar="LIST",
                   help=f"sr's own models to time on the same input ('' for none; default {DEFAULT_OURS})")
    p.add_argument("--ours-precision", default="auto", choices=("auto", "fp32", "bf16"),
                   help="precision of the --ours models (default auto, as sr upscale runs them)")
    p.add_argument("--rounds", type=int, default=3, help="timed interleaved rounds; medians (default 3)")
    p.add_argument("--warmup", type=int, default=1, choices=(0, 1),
                   help="an untimed call of each arm first (default 1; 0 times the first calls too)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: usable CPUs)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also list each arm's N costliest torch operators over one more call")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON to FILE")


def synthetic(size: int) -> np.ndarray:
    """(size, size, 3) float32 in [0, 1], the same on every machine: gradients, hard edges, a sine
    grating and seeded noise (a convolutional model's cost does not depend on the content)."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / max(size - 1, 1)
    r = 0.2 + 0.6 * xx
    g = 0.5 + 0.4 * np.sin(xx * 60) * np.cos(yy * 37)
    b = ((xx + yy) > 1).astype(np.float32) * 0.6 + 0.2 * ((np.floor(xx * 16) + np.floor(yy * 16)) % 2)
    noise = np.random.default_rng(0).normal(0, 0.03, (size, size, 3)).astype(np.float32)
    return np.clip(np.stack([r, g, b], axis=2) + noise, 0, 1).astype(np.float32)


def load_input(image: str | None, size: int) -> np.ndarray:
    if image is None:
        return synthetic(size)
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(image) as im:
            im = im.convert("RGB").resize((size, size), Image.LANCZOS)
    except (OSError, UnidentifiedImageError) as e:
        raise CLIError(f"--image {image}: {e}") from None
    return np.asarray(im, dtype=np.float32) / 255


def cpu_name() -> str:
    """The CPU's model name and flag summary as /proc/cpuinfo gives them (e.g. 'AMD EPYC, avx512_bf16')."""
    name, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and name == "unknown CPU":
                    name = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    have = [f for f in ("amx_bf16", "avx512_bf16") if f in flags]
    return f"{name}, {'/'.join(have) if have else 'no bf16 flags'}"


def parse_tiles(text: str) -> list[int | str]:
    """'0,auto,256' -> [0, 'auto', 256]: each 'auto' or a number of pixels (0: untiled)."""
    parts = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [t for t in parts if t != "auto" and not t.isdigit()]
    if bad:
        raise CLIError(f"--tiles: each setting is auto, 0 (untiled) or pixels, got {', '.join(bad)}")
    tiles: list[int | str] = [t if t == "auto" else int(t) for t in parts]
    if not tiles or len(set(tiles)) != len(tiles):
        raise CLIError(f"--tiles must list distinct settings, got {text!r}")
    return tiles


def tile_label(side: int | None) -> str:
    return "whole" if side is None else str(side)


def time_rounds(arms: dict[str, Callable[[], object]], rounds: int, start: int = 0
                ) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) seconds of each arm per round: each round runs every arm once, in an order rotated
    by the round's number (from ``start``) and reversed on odd ones."""
    names = list(arms)
    out: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(start, start + rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        if r % 2:
            order.reverse()
        for name in order:
            t0, c0 = time.perf_counter(), time.process_time()
            arms[name]()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            out[name].append((wall, cpu))
            print(f"  round {r + 1}: {name}: {wall:.2f} s ({cpu:.2f} s CPU)", file=sys.stderr, flush=True)
    return out


def table(rows: list[Row]) -> str:
    lines = ["| arm | precision | tile | seconds | CPU s | output MP/s | speed vs direct "
             "| max abs vs direct |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        speed = "-" if r.speed_vs_direct is None else f"{r.speed_vs_direct:.3f}x"
        diff = "-" if r.max_abs_vs_direct is None else f"{r.max_abs_vs_direct:.2e}"
        lines.append(f"| {r.arm} | {r.precision} | {r.tile} | {r.seconds:.2f} | {r.cpu_seconds:.2f} "
                     f"| {r.mp_per_s:.3f} | {speed} | {diff} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import torch

    from sr.cpu import cpu_bf16_kind, cpu_runs_bf16
    from sr.inference import UpscaleError, Upscaler
    from sr.inference.devices import usable_cpus
    from sr.inference.precision import precision_name
    from sr.io import DecodedImage
    from sr.request import UpscaleRequest

    if args.rounds < 1 or args.size < 16 or args.profile < 0:
        raise CLIError("--rounds must be >= 1, --size >= 16 and --profile >= 0")
    if args.json and not Path(args.json).parent.is_dir():
        raise CLIError(f"--json {args.json}: folder {Path(args.json).parent} does not exist")
    model = Path(args.model) if args.model else DEFAULT_MODEL
    if not model.is_file():
        raise CLIError(f"model file not found: {model}" + ("" if args.model else " (pass --model FILE)"))
    try:
        import spandrel
    except ImportError:
        raise CLIError('sr bench models needs spandrel: pip install -e ".[models]"') from None
    tiles = parse_tiles(args.tiles or ("auto" if args.images else "0,auto"))
    ours = [o.strip() for o in args.ours.split(",") if o.strip()]
    threads = args.threads or usable_cpus()
    torch.set_num_threads(threads)

    try:
        found = spandrel.ModelLoader(device="cpu").load_from_file(str(model))
    except Exception as e:  # spandrel's loader raises many kinds; the benchmark says which, in one line
        raise CLIError(f"{model}: spandrel could not load it ({type(e).__name__}: {e})") from None
    if not isinstance(found, spandrel.ImageModelDescriptor):
        raise CLIError(f"{model}: not an image-to-image model ({found.purpose})")
    scale = int(found.scale)
    if args.precision is None and args.images:
        precisions = ["auto"]
    elif args.precision is None:
        precisions = ["fp32"] + (["bf16"] if cpu_runs_bf16() and found.supports_bfloat16 else [])
    else:
        precisions = [t.strip() for t in args.precision.split(",") if t.strip()]
        bad = [t for t in precisions if t not in PRECISIONS]
        if bad or not precisions or len(set(precisions)) != len(precisions):
            raise CLIError(f"--precision: give distinct names of {', '.join(PRECISIONS)}, "
                           f"got {args.precision!r}")
        if "bf16" in precisions and not (cpu_runs_bf16() and found.supports_bfloat16):
            raise CLIError("--precision bf16: this CPU cannot run bf16, or spandrel says the model does not")
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}

    if args.images:
        from sr.evaluation import list_images
        from sr.io import ImageError, read_image

        try:
            paths = list_images(Path(args.images))
        except FileNotFoundError:
            raise CLIError(f"--images {args.images}: folder not found") from None
        if not paths:
            raise CLIError(f"--images {args.images}: no images there")
        try:
            imgs = [read_image(p) for p in paths]
        except ImageError as e:
            raise CLIError(f"--images {args.images}: {e}") from None
        imgs = [dataclasses.replace(d, pixels=np.repeat(d.pixels, 3, axis=2)) if d.pixels.shape[2] == 1
                else d for d in imgs]
        what = f"{len(imgs)} images of {args.images}"
    else:
        imgs = [DecodedImage(load_input(args.image, args.size))]
        what = f"a {args.size}x{args.size} input ({'synthetic' if args.image is None else args.image})"
    out_mp = sum(d.pixels.shape[0] * d.pixels.shape[1] for d in imgs) * scale * scale / 1e6
    nchw = [torch.from_numpy(np.ascontiguousarray(d.pixels.transpose(2, 0, 1)))[None] for d in imgs]
    biggest = max(d.pixels.shape[0] * d.pixels.shape[1] for d in imgs)
    big_h, big_w = max((d.pixels.shape[:2] for d in imgs), key=lambda hw: hw[0] * hw[1])

    arms: dict[str, Callable[[], list]] = {}
    meta: dict[str, tuple[str, str]] = {}  # arm -> (precision, tile label)
    to_hwc: dict[str, Callable[[object], np.ndarray]] = {}

    def sr_pixels(result: object) -> np.ndarray:
        return result.image.pixels  # type: ignore[attr-defined]

    def tensor_pixels(y: object) -> np.ndarray:
        return y[0].float().permute(1, 2, 0).numpy()  # type: ignore[index]

    def sr_arm(up: object) -> Callable[[], list]:
        return lambda: [up.upscale(d, scale=scale) for d in imgs]  # type: ignore[attr-defined]

    request = UpscaleRequest(scale=scale)
    try:
        for p in precisions:
            if p != "auto":
                d = spandrel.ModelLoader(device="cpu").load_from_file(str(model))
                d.model.eval().to(dtypes[p])
                ts = [t.to(dtypes[p]) for t in nchw]
                name = f"direct {p}"
                arms[name] = lambda d=d, ts=ts: [d(t) for t in ts]
                meta[name], to_hwc[name] = (p, "-"), tensor_pixels
            for tile in tiles:
                up = Upscaler(model, device="cpu", tile=tile, precision=p, threads=threads)
                side = up.plan(big_h, big_w, request).tiles_side[0]
                name = f"sr {p} " + ("untiled" if tile == 0 else f"tile {tile}")
                arms[name] = sr_arm(up)
                dtype = precision_name(up.dtype_for(scale, biggest))
                meta[name], to_hwc[name] = (dtype, tile_label(side)), sr_pixels
        for own in ours:  # sr's own models as sr runs them by default: precision auto, tile auto
            up = Upscaler(own, device="cpu", tile="auto", precision=args.ours_precision, threads=threads)
            if scale not in up.scales:
                raise CLIError(f"--ours {own}: has no x{scale} model (scales {up.scales})")
            side = up.plan(big_h, big_w, request).tiles_side[0]
            name = f"{own} {args.ours_precision}"
            arms[name] = sr_arm(up)
            dtype = precision_name(up.dtype_for(scale, biggest))
            meta[name], to_hwc[name] = (dtype, tile_label(side)), sr_pixels
    except UpscaleError as e:
        raise CLIError(str(e)) from None

    load_before = os.getloadavg()
    print(f"{model.name}: {found.architecture.name}, x{scale}, {what}, {threads} thread(s), CPU "
          f"{cpu_name()} ({cpu_bf16_kind()}), load average {load_before[0]:.2f} at the start",
          file=sys.stderr, flush=True)
    # the first call of each arm (untimed with --warmup 1, else round 1's) gives the differences
    diffs: dict[str, float | None] = {}
    direct_out: dict[str, list[np.ndarray]] = {}
    first: dict[str, tuple[float, float]] = {}
    with torch.inference_mode():
        for name, fn in arms.items():
            t0, c0 = time.perf_counter(), time.process_time()
            out = [to_hwc[name](y) for y in fn()]
            first[name] = (time.perf_counter() - t0, time.process_time() - c0)
            print(f"  {'warm-up' if args.warmup else 'round 1'}: {name}: {first[name][0]:.2f} s "
                  f"({first[name][1]:.2f} s CPU)", file=sys.stderr, flush=True)
            p = meta[name][0]
            if name.startswith("direct "):
                direct_out[p] = [o.copy() for o in out]
                diffs[name] = None
            elif name.startswith("sr ") and p in direct_out:
                diffs[name] = max(float(np.abs(a - b).max()) for a, b in zip(out, direct_out[p], strict=True))
            else:
                diffs[name] = None
            del out
        direct_out.clear()
        times = time_rounds(arms, args.rounds - (0 if args.warmup else 1), start=0 if args.warmup else 1)
        if not args.warmup:
            times = {name: [first[name], *times[name]] for name in arms}
    load_after = os.getloadavg()

    rows: list[Row] = []
    direct_s = {meta[n][0]: statistics.median(w for w, _ in times[n])
                for n in arms if n.startswith("direct ")}
    for name in arms:
        wall = statistics.median(w for w, _ in times[name])
        cpu = statistics.median(c for _, c in times[name])
        p, tile = meta[name]
        speed = round(direct_s[p] / wall, 4) if name.startswith("sr ") and p in direct_s else None
        rows.append(Row(arm=name, precision=p, tile=tile, seconds=round(wall, 3), cpu_seconds=round(cpu, 3),
                        mp_per_s=round(out_mp / wall, 4), speed_vs_direct=speed,
                        max_abs_vs_direct=diffs[name], rounds=[round(w, 3) for w, _ in times[name]]))
    print(f"{model.name} ({found.architecture.name}, x{scale}) on {what}, output "
          f"{out_mp:.2f} MP; {cpu_name()}, {threads} thread(s); median of {args.rounds} interleaved rounds; "
          f"load average (1 min) {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end")
    print(table(rows))
    profiles = {}
    if args.profile:
        from .train import print_profile, profile_ops

        with torch.inference_mode():
            for name, fn in arms.items():
                profiles[name] = profile_ops(fn, args.profile)
                print_profile(name, profiles[name], per="call")
    if args.json:
        write_json(args.json, {"model": str(model), "architecture": found.architecture.name, "scale": scale,
                               "size": None if args.images else args.size, "image": args.image,
                               "images": args.images, "output_mp": out_mp, "threads": threads,
                               "cpu": cpu_name(), "cpu_kind": cpu_bf16_kind(), "rounds": args.rounds,
                               "load_average": {"start": load_before, "end": load_after},
                               "rows": [asdict(r) for r in rows], "profiles": profiles})
    return 0
