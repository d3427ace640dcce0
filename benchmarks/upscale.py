"""``sr bench upscale``: throughput (output megapixels/s) of models vs bicubic, in one run.

Each HR image of the folder (Set14 by default) is modcropped and shrunk by the model's scale with
the project's MATLAB bicubic, then upscaled back: by the model (``Upscaler.upscale``, the same path
as ``sr upscale``, decoding and encoding excluded), by the project's ``imresize``, and by PIL's
BICUBIC. One warm-up image per method is not timed. ``--repeat`` times a second pass over the same
images: the first pass meets each image size for the first time, the second only sizes it has seen,
so the two tell per-shape setup (such as cuDNN building a plan for every new convolution shape on
CUDA) from the steady-state speed.

``--precision fp32,bf16`` runs each model once per precision, side by side: image by image, the arms
take turns (in rotating order), so a machine whose load changes during the run slows every arm
alike. Each arm's row gives its speed relative to the first arm and the PSNR of its outputs against
the first arm's (float, unrounded).

``--ray`` compares the whole ``sr upscale`` command instead, local against ``--ray`` (a local Ray, or
RAY_ADDRESS's cluster, with ``--ray-actors`` actors of one thread each), on the same folder of LR
images: output MP/s, wall time and peak memory (PSS summed over the command's process tree: driver,
Ray's daemons and workers), and whether the outputs are byte-identical.

``--sweep-tile PX`` measures the tiling instead: PSNR of the tiled output against the whole-image
output, per tile overlap and blend (hard cut, the default cross-fade over the central half of the
overlap, a linear fade across all of it), on the same LR images.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sr.errors import CLIError

# sr's heavy modules (torch) are imported inside the functions: `sr bench upscale` with a bad
# argument fails before torch is imported.

REPO = Path(__file__).resolve().parents[1]
DEFAULT_IMAGES = REPO.parent / "shared" / "datasets" / "benchmark" / "Set14"
DEFAULT_MODELS = ("asa-base-x2", "asa-base-x4")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", default=None, metavar="NAME_OR_PATH",
                   help="shipped model name or .safetensors file; repeatable "
                        f"(default: {', '.join(DEFAULT_MODELS)})")
    p.add_argument("--images", default=str(DEFAULT_IMAGES), help="folder of HR images (default: Set14)")
    p.add_argument("--device", default="cpu", help="device for the models (default cpu)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: usable CPUs)")
    p.add_argument("--tile", default="auto", help="tile size for the models: auto, 0 (off) or pixels")
    p.add_argument("--attention-path", default="auto", choices=("auto", "tiered", "static"),
                   help="routed attention's inference path (default auto: tiered on CPU, static elsewhere)")
    p.add_argument("--precision", default="auto", metavar="LIST",
                   help="comma-separated precisions to compare side by side, e.g. fp32,bf16 (auto, fp32, "
                        "bf16; default auto): rows give speed and output PSNR relative to the first")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="with --precision: also profile each arm on the largest image (torch.profiler) and "
                        "list its N costliest operators, self CPU ms per image")
    p.add_argument("--max-images", type=int, default=None, help="use only the first N images")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON ('-' = stdout)")
    p.add_argument("--repeat", action="store_true",
                   help="also time a second pass over the same images (sizes already seen): per-shape "
                        "setup shows as a first pass slower than the second (one --precision only)")
    p.add_argument("--ray", action="store_true",
                   help="instead of model vs bicubic: the sr upscale command on the LR folder, local vs "
                        "--ray, MP/s and peak memory side by side (needs the cluster extra)")
    p.add_argument("--ray-actors", type=int, default=2, metavar="N",
                   help="actors for --ray (one CPU thread each; default 2)")
    p.add_argument("--copies", type=int, default=1, metavar="N",
                   help="--ray: put each LR image N times in the folder (fixed start-up costs amortize)")
    p.add_argument("--sweep-tile", type=int, default=None, metavar="PX",
                   help="instead of throughput: PSNR of tiled vs whole-image output with tiles of PX pixels")
    p.add_argument("--sweep-overlaps", default="0,8,16,32", metavar="LIST",
                   help="overlaps for --sweep-tile (default 0,8,16,32)")


def _load_images(folder: Path, limit: int | None):
    import numpy as np

    from sr.evaluation import list_images, load_hr

    try:
        paths = list_images(folder)
    except FileNotFoundError:
        raise CLIError(f"image folder not found: {folder} (pass --images DIR)") from None
    if limit is not None:
        paths = paths[:limit]
    if not paths:
        raise CLIError(f"no images in {folder}")
    images = []
    for p in paths:
        hr = load_hr(p)
        images.append(np.repeat(hr[:, :, None], 3, axis=2) if hr.ndim == 2 else hr)
    return images


def _time(fn, inputs: list, out_pixels: list[int], passes: int = 1) -> tuple[list[float], float]:
    """(seconds of each pass, output megapixels of one pass) for fn over inputs, after one untimed
    warm-up call."""
    fn(inputs[0])
    seconds = []
    for _ in range(passes):
        start = time.perf_counter()
        for x in inputs:
            fn(x)
        seconds.append(time.perf_counter() - start)
    return seconds, sum(out_pixels) / 1e6


def _time_arms(fns: list, inputs: list, out_pixels: list[int]) -> tuple[list[float], float, list[list]]:
    """(seconds per arm, output megapixels, outputs per arm) for fns over the same inputs: one
    untimed warm-up call each, then each input through every arm in turn, the order rotating from
    one input to the next, so slow phases of a loaded machine land on every arm alike."""
    for fn in fns:
        fn(inputs[0])
    seconds = [0.0] * len(fns)
    outputs: list[list] = [[] for _ in fns]
    for n, x in enumerate(inputs):
        for k in range(len(fns)):
            arm = (n + k) % len(fns)
            start = time.perf_counter()
            outputs[arm].append(fns[arm](x))
            seconds[arm] += time.perf_counter() - start
    return seconds, sum(out_pixels) / 1e6, outputs


def parse_precisions(text: str) -> list[str]:
    """'fp32,bf16' -> ['fp32', 'bf16'] (each checked; duplicates and empties refused)."""
    from sr.inference.precision import PrecisionError, parse_precision

    names = [t.strip() for t in text.split(",")]
    try:
        parsed = [parse_precision(t) for t in names]
    except PrecisionError as e:
        raise CLIError(f"--precision: {e}") from None
    if len(set(parsed)) != len(parsed):
        raise CLIError(f"--precision lists a precision twice: {text!r}")
    return parsed


def _precision_rows(name: str, ups: list, decoded: list, out_px: list[int], profile: int = 0) -> list[dict]:
    """One row per precision arm of one model, timed side by side (:func:`_time_arms`); with
    ``profile``, each arm's costliest operators on the largest image (``profile`` key)."""
    import numpy as np

    from sr.inference.precision import precision_name
    from sr.metrics import float_psnr

    s = ups[0].scales[0]
    fns = [lambda d, up=up: up.upscale(d, scale=s).image.pixels for up in ups]
    seconds, mp, outputs = _time_arms(fns, decoded, out_px)
    rows = []
    for k, up in enumerate(ups):
        psnr = float(np.mean([float_psnr(a, b) for a, b in zip(outputs[k], outputs[0], strict=True)]))
        precision = precision_name(up.dtype_for(s))
        label = f"{Path(name).stem} {precision}"
        rows.append({"method": label, "scale": s, "images": len(decoded), "output_mp": round(mp, 3),
                     "seconds": round(seconds[k], 3), "mp_per_s": round(mp / seconds[k], 4),
                     "device": str(up.device), "threads": up.threads, "attention_path": up.attention_path,
                     "precision": precision, "speedup": round(seconds[0] / seconds[k], 3),
                     "psnr_vs_first": None if k == 0 else round(psnr, 2)})
        print(f"  {label} x{s}: {mp / seconds[k]:.3f} MP/s ({seconds[0] / seconds[k]:.2f}x the first)",
              file=sys.stderr, flush=True)
    if profile:
        from .train import print_profile, profile_ops

        largest = max(decoded, key=lambda d: d.width * d.height)
        for k, row in enumerate(rows):
            row["profile"] = profile_ops(lambda f=fns[k]: f(largest), profile)
            print_profile(f"{row['method']} x{s}, {largest.width}x{largest.height} input", row["profile"],
                          per="image")
    return rows


def run(args: argparse.Namespace) -> int:
    import numpy as np
    from PIL import Image

    from sr.inference import UpscaleError, Upscaler
    from sr.io import DecodedImage
    from sr.resize import imresize, modcrop

    if args.max_images is not None and args.max_images < 1:
        raise CLIError("--max-images must be >= 1")
    tile = args.tile if args.tile == "auto" else int(args.tile) if args.tile.isdigit() else None
    if tile is None:
        raise CLIError(f"--tile must be auto, 0 or a number of pixels, got {args.tile!r}")
    if args.ray:
        return _ray_vs_local(args, tile)
    precisions = parse_precisions(args.precision)
    if args.repeat and len(precisions) > 1:
        raise CLIError("--repeat times one precision: give one --precision, or drop --repeat")
    if args.profile < 0 or (args.profile and len(precisions) < 2):
        raise CLIError("--profile N (N >= 1) goes with --precision listing two or more, e.g. fp32,bf16")
    images = _load_images(Path(args.images), args.max_images)
    models, arms = [], {}
    for name in args.model or DEFAULT_MODELS:
        try:
            ups = [Upscaler(name, device=args.device, tile=tile, threads=args.threads,
                            attention_path=args.attention_path, precision=p) for p in precisions]
        except UpscaleError as e:
            raise CLIError(f"{e}" + ("" if args.model else " (pass --model NAME_OR_PATH)")) from None
        up = ups[0]
        if len(up.scales) != 1:
            raise CLIError(f"--model {name!r} is a family ({up.scales}); name one scale, e.g. {name}-x2")
        models.append((name, up))
        arms[name] = ups

    if args.sweep_tile is not None:
        rows = _sweep(models, images, args.sweep_tile, args.sweep_overlaps)
        _write_json(rows, args.json)
        return 0
    rows = []
    for name, up in models:
        s = up.scales[0]
        hrs = [modcrop(hr, s) for hr in images]
        lrs = [imresize(hr, 1 / s) for hr in hrs]
        out_px = [lr.shape[0] * s * lr.shape[1] * s for lr in lrs]
        decoded = [DecodedImage(lr.astype(np.float32) / 255) for lr in lrs]
        floats = [d.pixels for d in decoded]
        pils = [Image.fromarray(lr) for lr in lrs]
        if len(arms[name]) > 1:
            rows += _precision_rows(name, arms[name], decoded, out_px, args.profile)
        methods = [] if len(arms[name]) > 1 else [
            (Path(name).stem, lambda d, up=up, s=s: up.upscale(d, scale=s), decoded)]
        methods += [
            ("bicubic (sr imresize)", lambda x, s=s: imresize(x, s), floats),
            ("bicubic (PIL)", lambda im, s=s: im.resize((im.width * s, im.height * s), Image.BICUBIC), pils),
        ]
        for label, fn, inputs in methods:
            (seconds, *again), mp = _time(fn, inputs, out_px, passes=2 if args.repeat else 1)
            row = {"method": label, "scale": s, "images": len(inputs), "output_mp": round(mp, 3),
                   "seconds": round(seconds, 3), "mp_per_s": round(mp / seconds, 4),
                   "device": str(up.device) if label == Path(name).stem else "cpu", "threads": up.threads}
            if label == Path(name).stem:
                row["attention_path"] = up.attention_path
            if again:
                row.update(seconds_repeat=round(again[0], 3), mp_per_s_repeat=round(mp / again[0], 4))
            rows.append(row)
            print(f"  {label} x{s}: {mp / seconds:.3f} MP/s", file=sys.stderr, flush=True)

    header = f"{'method':<26} {'scale':>5} {'images':>6} {'out MP':>8} {'seconds':>8} {'MP/s':>9}"
    if args.repeat:
        header += f" {'MP/s again':>10}"
    sided = len(precisions) > 1
    if sided:
        header += f" {'speed-up':>8} {'dB vs first':>11}"
    print(f"{len(images)} images from {args.images}; {models[0][1].threads} CPU thread(s)")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['method']:<26} {r['scale']:>5} {r['images']:>6} {r['output_mp']:>8.2f} "
              f"{r['seconds']:>8.2f} {r['mp_per_s']:>9.3f}"
              + (f" {r['mp_per_s_repeat']:>10.3f}" if args.repeat else "")
              + (_sided_cells(r) if sided else ""))
    _write_json(rows, args.json)
    return 0


def _sided_cells(row: dict) -> str:
    """The speed-up and PSNR-vs-first cells of a precision arm's row (blank for bicubic rows)."""
    if "speedup" not in row:
        return ""
    db = row["psnr_vs_first"]
    return f" {row['speedup']:>7.2f}x {'-' if db is None else f'{db:.2f}':>11}"


def _write_json(rows: list[dict], target: str | None) -> None:
    if not target:
        return
    text = json.dumps(rows, indent=2)
    if target == "-":
        print(text)
    else:
        Path(target).write_text(text + "\n")


def _sweep(models: list, images: list, tile: int, overlaps_text: str) -> list[dict]:
    import numpy as np
    import torch

    from sr.inference.tiling import BLEND_RAMP, min_tile, plan_axis, run_tiled
    from sr.metrics import float_psnr
    from sr.resize import imresize, modcrop

    try:
        overlaps = [int(v) for v in overlaps_text.split(",") if v.strip()]
    except ValueError:
        raise CLIError(f"--sweep-overlaps must be comma-separated integers, got {overlaps_text!r}") from None
    blends = [("cut", 0.0), ("fade", BLEND_RAMP), ("linear", 1.0)]

    rows = []
    print(f"{'model':<24} {'tile':>5} {'overlap':>7} {'blend':>7} {'tiles':>6} {'mean dB':>8} {'min dB':>7} "
          f"{'compute':>8}")
    for name, up in models:
        s = up.scales[0]
        run, align = up.tile_runner(s)
        lrs = [np.clip(imresize(modcrop(hr, s).astype(np.float32) / 255, 1 / s), 0, 1) for hr in images]
        with torch.inference_mode():
            wholes = [run(lr)[0] for lr in lrs]
            for ov in overlaps:
                if tile < min_tile(ov, align):
                    need = min_tile(ov, align)
                    print(f"  overlap {ov}: tile {tile} is too small (need {need})", file=sys.stderr)
                    continue
                for blend, ramp in blends[:1] if ov == 0 else blends:
                    scores, tiles, area = [], 0, 0
                    for lr, whole in zip(lrs, wholes, strict=True):
                        rows_ = plan_axis(lr.shape[0], tile, ov, align)
                        cols_ = plan_axis(lr.shape[1], tile, ov, align)
                        tiles += len(rows_) * len(cols_)
                        area += sum(b - a for a, b in rows_) * sum(b - a for a, b in cols_)
                        scores.append(float_psnr(run_tiled(lr, run, s, tile, ov, align, ramp=ramp)[0], whole))
                    compute = area / sum(lr.shape[0] * lr.shape[1] for lr in lrs)
                    label = "none" if ov == 0 else blend
                    row = {"model": Path(name).stem, "tile": tile, "overlap": ov, "blend": label,
                           "tiles": tiles, "mean_psnr": round(float(np.mean(scores)), 2),
                           "min_psnr": round(min(scores), 2), "compute": round(compute, 3)}
                    rows.append(row)
                    print(f"{row['model']:<24} {tile:>5} {ov:>7} {label:>7} {tiles:>6} "
                          f"{row['mean_psnr']:>8.2f} {row['min_psnr']:>7.2f} {compute:>7.2f}x", flush=True)
    return rows


# ------------------------------------------------------------------------------ --ray: local vs Ray


def _process_tree_pss(root: int) -> int | None:
    """Bytes of PSS (shared pages split among their users) of ``root`` and all its descendants, from
    /proc (Linux); None where that is not available."""
    proc = Path("/proc")
    parents: dict[int, int] = {}
    for d in proc.iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                parents[int(d.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError):
                continue
    tree, frontier = {root}, [root]
    while frontier:
        kids = [pid for pid, ppid in parents.items() if ppid in frontier and pid not in tree]
        tree.update(kids)
        frontier = kids
    total, seen = 0, False
    for pid in tree:
        try:
            for line in (proc / str(pid) / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    seen = True
                    break
        except OSError:
            continue
    return total if seen else None


def _measure(cmd: list[str]) -> dict:
    """Run ``cmd``; wall seconds, its summary line, the peak PSS of its process tree (sampled 4x/s)."""
    import re
    import subprocess
    import threading

    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak: list[int] = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            pss = _process_tree_pss(proc.pid)
            if pss is not None:
                peak[0] = max(peak[0], pss)
            done.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    m = re.search(r"(\d+) done, (\d+) skipped, (\d+) failed in ([\d.]+) s \(([\d.]+) output MP/s\)", out)
    if proc.returncode != 0 or m is None:
        raise CLIError(f"{' '.join(cmd[2:5])}... failed ({proc.returncode}): {err.strip()[-500:]}")
    return {"wall_s": round(wall, 2), "pipeline_s": float(m[4]), "done": int(m[1]),
            "peak_mib": round(peak[0] / 2**20) if peak[0] else None}


def _ray_vs_local(args: argparse.Namespace, tile: int | str) -> int:
    import os
    import tempfile

    import numpy as np

    from sr.inference import UpscaleError, Upscaler
    from sr.io import DecodedImage, write_image
    from sr.resize import imresize, modcrop

    try:
        import ray  # noqa: F401 - only checked here: the Ray run is a child process
    except ImportError:
        from sr.batch.cluster import INSTALL_HINT

        raise CLIError(INSTALL_HINT.format(ray="--ray")) from None
    if args.ray_actors < 1 or args.copies < 1:
        raise CLIError("--ray-actors and --copies must be >= 1")
    name = (args.model or DEFAULT_MODELS)[0]
    try:
        up = Upscaler(name, device="cpu", tile=tile)
    except UpscaleError as e:
        raise CLIError(str(e)) from None
    s = min(up.scales)
    images = _load_images(Path(args.images), args.max_images)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = args.threads or usable
    rows = []
    with tempfile.TemporaryDirectory(prefix="sr-bench-ray-") as tmp:
        lr_dir = Path(tmp) / "lr"
        lr_dir.mkdir()
        out_mp = 0.0
        for i, hr in enumerate(images):  # the LR inputs, as files: the commands read and decode them
            lr = imresize(modcrop(hr, s), 1 / s)
            for c in range(args.copies):
                write_image(lr_dir / f"{i:03d}_{c}.png", DecodedImage(lr.astype(np.float32) / 255), "png")
                out_mp += lr.shape[0] * s * lr.shape[1] * s / 1e6
        base = [sys.executable, "-m", "sr", "upscale", str(lr_dir), "--model", name, "--scale", str(s),
                "--device", args.device, "--tile", str(args.tile), "--attention-path", args.attention_path]
        runs = [("local", [*base, "-o", str(Path(tmp) / "local"), "--threads", str(threads)]),
                (f"ray, {args.ray_actors} actors", [*base, "-o", str(Path(tmp) / "ray"), "--threads", "1",
                                                   "--ray", "--ray-actors", str(args.ray_actors)])]
        for label, cmd in runs:
            print(f"  {label}...", file=sys.stderr, flush=True)
            row = {"run": label, "images": len(images) * args.copies, "output_mp": round(out_mp, 3),
                   **_measure(cmd)}
            # MP/s from the exact pixel count (the summary line rounds): the pipeline's own time (the
            # command's summary: Ray's start-up excluded, actor start-up included) and the whole wall
            row.update(mp_per_s=round(out_mp / row["pipeline_s"], 4) if row["pipeline_s"] else None,
                       mp_per_s_wall=round(out_mp / row["wall_s"], 4))
            rows.append(row)
        local, remote = (sorted((Path(tmp) / d).iterdir()) for d in ("local", "ray"))
        identical = [p.name for p in local] == [p.name for p in remote] and all(
            a.read_bytes() == b.read_bytes() for a, b in zip(local, remote, strict=True))
    for r in rows:
        r["ratio"] = round(r["mp_per_s"] / rows[0]["mp_per_s"], 3) if rows[0]["mp_per_s"] and r["mp_per_s"] \
            else None
        r["identical_outputs"] = identical
    print(f"{rows[0]['images']} images ({len(images)} from {args.images} x {args.copies}), "
          f"{Path(name).stem} x{s}, {out_mp:.2f} output MP; local: {threads} thread(s), "
          f"Ray: {args.ray_actors} actors x 1 thread")
    header = (f"{'run':<18} {'wall s':>7} {'pipeline s':>10} {'MP/s':>8} {'vs local':>8} {'MP/s wall':>9} "
              f"{'peak MiB':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        peak = "n/a" if r["peak_mib"] is None else r["peak_mib"]
        rate = f"{r['mp_per_s']:>8.3f}" if r["mp_per_s"] else f"{'n/a':>8}"
        ratio = f"{r['ratio']:>7.2f}x" if r["ratio"] else f"{'n/a':>8}"
        print(f"{r['run']:<18} {r['wall_s']:>7.1f} {r['pipeline_s']:>10.1f} {rate} {ratio} "
              f"{r['mp_per_s_wall']:>9.3f} {peak:>9}")
    print(f"outputs byte-identical: {'yes' if identical else 'NO'}")
    _write_json(rows, args.json)
    return 0
