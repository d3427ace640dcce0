"""``sr bench upscale``: throughput (output megapixels/s) of models vs bicubic, in one run.

Each HR image of the folder (Set14 by default) is modcropped and shrunk by the model's scale with
the project's MATLAB bicubic, then upscaled back: by the model (``Upscaler.upscale``, the same path
as ``sr upscale``, decoding and encoding excluded), by the project's ``imresize``, and by PIL's
BICUBIC. One warm-up image per method is not timed. ``--repeat`` times a second pass over the same
images: the first pass meets each image size for the first time, the second only sizes it has seen,
so the two tell per-shape setup (such as cuDNN building a plan for every new convolution shape on
CUDA) from the steady-state speed.

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

from ..cli import CLIError

REPO = Path(__file__).resolve().parents[2]
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
    p.add_argument("--max-images", type=int, default=None, help="use only the first N images")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON ('-' = stdout)")
    p.add_argument("--repeat", action="store_true",
                   help="also time a second pass over the same images (sizes already seen): per-shape "
                        "setup shows as a first pass slower than the second")
    p.add_argument("--sweep-tile", type=int, default=None, metavar="PX",
                   help="instead of throughput: PSNR of tiled vs whole-image output with tiles of PX pixels")
    p.add_argument("--sweep-overlaps", default="0,8,16,32", metavar="LIST",
                   help="overlaps for --sweep-tile (default 0,8,16,32)")


def _load_images(folder: Path, limit: int | None):
    import numpy as np

    from ..evaluation import list_images, load_hr

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


def run(args: argparse.Namespace) -> int:
    import numpy as np
    from PIL import Image

    from ..inference import UpscaleError, Upscaler
    from ..io import DecodedImage
    from ..resize import imresize, modcrop

    if args.max_images is not None and args.max_images < 1:
        raise CLIError("--max-images must be >= 1")
    tile = args.tile if args.tile == "auto" else int(args.tile) if args.tile.isdigit() else None
    if tile is None:
        raise CLIError(f"--tile must be auto, 0 or a number of pixels, got {args.tile!r}")
    images = _load_images(Path(args.images), args.max_images)
    models = []
    for name in args.model or DEFAULT_MODELS:
        try:
            up = Upscaler(name, device=args.device, tile=tile, threads=args.threads,
                          attention_path=args.attention_path)
        except UpscaleError as e:
            raise CLIError(f"{e}" + ("" if args.model else " (pass --model NAME_OR_PATH)")) from None
        if len(up.scales) != 1:
            raise CLIError(f"--model {name!r} is a family ({up.scales}); name one scale, e.g. {name}-x2")
        models.append((name, up))

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
        methods = [
            (Path(name).stem, lambda d, up=up, s=s: up.upscale(d, scale=s), decoded),
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
    print(f"{len(images)} images from {args.images}; {models[0][1].threads} CPU thread(s)")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['method']:<26} {r['scale']:>5} {r['images']:>6} {r['output_mp']:>8.2f} "
              f"{r['seconds']:>8.2f} {r['mp_per_s']:>9.3f}"
              + (f" {r['mp_per_s_repeat']:>10.3f}" if args.repeat else ""))
    _write_json(rows, args.json)
    return 0


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

    from ..inference.tiling import BLEND_RAMP, min_tile, plan_axis, run_tiled
    from ..metrics import float_psnr
    from ..resize import imresize, modcrop

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
