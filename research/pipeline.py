"""``python -m research.pipeline``: the end-to-end figures of ``sr upscale``, reproducibly.

**big**: a 4000 x 3000 photo-like JPEG (quality 90) to x2 with the defaults and ``-f jpg``, run as
its own ``sr upscale`` process; its CPU time, wall time and peak RSS (the child's ``ru_maxrss``)
against the conv body's own time for those pixels: the model and precision the defaults chose, the
network with every attention block bypassed (:func:`benchmarks.cost.attention_bypassed`, as
``sr bench cost`` does), timed on tiles of the auto plan's size cut from the same image, per pixel
times the image's pixels (overlap not counted). A 2000 x 1500 input to x2 (a 12 MP output) gives a second
peak RSS. The picture is a mosaic of the ``--valid`` images at their own resolution (flipped
where repeated), so it has photographic detail everywhere; it is written to ``--work``, never to
the repository.

**precision**: ``sr upscale --precision bf16`` against ``--precision fp32`` on the first
``--images`` valid images, x2 and x4 (``--model asa-base``), the four runs interleaved in each of
``--rounds`` rounds; per configuration the median of the batch time ``sr upscale`` prints (first
read to last write, the model's loading included, the interpreter's start-up not), and of the
process's CPU time less that of the same command as a dry run (``-n``: start-up, imports, planning),
which is far steadier than wall time on a loaded machine. ``--baseline DIR`` runs the same commands
with a second checkout's ``sr`` (another commit, say) interleaved in every round, so both trees'
ratios come from one stretch of the machine's time.

Everything runs with ``--threads 1`` (the shared machine's rule); the ratios are the figures to
quote, the lone seconds move with the load.

    python -m research.pipeline --valid /work/shared/datasets/valid --work /tmp/pipe --json pipe.json
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.tooling import write_json
from sr.errors import CLIError

from ._script import run_script

BATCH_TIME = re.compile(r"(\d+) done, \d+ skipped, (\d+) failed in (\d+\.\d+) s")
STAGE_SUMS = re.compile(r"stages over \d+ files?: decode (\d+\.\d+) s, upscale (\d+\.\d+) s, "
                        r"encode (\d+\.\d+) s")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--valid", required=True,
                   help="folder of valid images (the mosaic and the precision runs)")
    p.add_argument("--work", required=True, help="scratch folder for the mosaic and the outputs")
    p.add_argument("--what", default="big,precision",
                   help="big, stages and/or precision (default big,precision)")
    p.add_argument("--images", type=int, default=12, help="valid images for the precision runs (default 12)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the precision runs")
    p.add_argument("--body-rounds", type=int, default=5, help="rounds of the conv body timing (default 5)")
    p.add_argument("--compare-tile", type=int, default=None, metavar="N",
                   help="big: also run the 4000x3000 job with --tile N (e.g. 512, the auto tile before "
                        "it followed measured speed), right after the default one")
    p.add_argument("--baseline", metavar="DIR", default=None,
                   help="precision: also run a second checkout's sr (its source tree), interleaved in "
                        "every round, to compare two commits side by side")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")


def valid_images(folder: Path) -> list[Path]:
    files = sorted(f for f in folder.iterdir() if f.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp"))
    if not files:
        raise CLIError(f"--valid {folder}: no images")
    return files


def mosaic(files: list[Path], width: int, height: int) -> np.ndarray:
    """(height, width, 3) uint8: the images side by side in rows, flipped on every repeat."""
    from PIL import Image

    canvas = np.zeros((height, width, 3), dtype=np.uint8)
    y = n = 0
    while y < height:
        x, row_h = 0, 0
        while x < width:
            with Image.open(files[n % len(files)]) as im:
                a = np.asarray(im.convert("RGB"))
            if (n // len(files)) % 2:
                a = a[:, ::-1]
            n += 1
            h, w = min(a.shape[0], height - y), min(a.shape[1], width - x)
            canvas[y : y + h, x : x + w] = a[:h, :w]
            x, row_h = x + w, max(row_h, h)
        y += row_h
    return canvas


def run_sr(args: list[str], tree: Path | None = None) -> dict:
    """One ``sr upscale`` process: its output, wall seconds, CPU seconds and peak RSS bytes.
    ``tree``: run that source tree's ``sr`` (first on the path, and the working folder) instead."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sr", "upscale", *args, "--threads", "1"], env=env,
                            cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read() if proc.stdout is not None else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise CLIError(f"sr upscale {' '.join(args)} failed ({proc.returncode}): {out.strip()[-500:]}")
    m = BATCH_TIME.search(out)
    stages = STAGE_SUMS.search(out)  # with -v
    return {"out": out, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_bytes": usage.ru_maxrss * 1024, "batch_s": float(m.group(3)) if m else None,
            "stages_s": [float(v) for v in stages.groups()] if stages else None}


def body_time(path: Path, rounds: int) -> dict:
    """The conv body of the model and precision ``sr upscale``'s defaults give ``path`` at x2, per
    pixel, on tiles of the auto plan's size from the image itself; CPU time, medians."""
    import torch

    from benchmarks.cost import attention_bypassed
    from sr.inference import Upscaler
    from sr.io import read_image, to_float
    from sr.request import UpscaleRequest

    torch.set_num_threads(1)
    auto = Upscaler("auto", device="cpu", threads=1)
    family = auto.choose(path).model
    up = Upscaler(family, device="cpu", threads=1)
    img = read_image(path)
    plan = up.plan(img.height, img.width, UpscaleRequest(scale=2))
    side = plan.tiles_side[0] or max(img.height, img.width)
    net = up.network(2)
    dtype = next(net.parameters()).dtype
    pixels = to_float(img.pixels)
    spots = [(y, x) for y in (0, (img.height - side) // 2, img.height - side)
             for x in (0, (img.width - side) // 2, img.width - side)]
    crops = [np.ascontiguousarray(pixels[y : y + side, x : x + side].transpose(2, 0, 1)) for y, x in spots]
    tiles = [torch.from_numpy(c)[None].to(dtype).contiguous(memory_format=torch.channels_last) for c in crops]
    times: dict[str, list[float]] = {"body": [], "forward": []}
    with torch.inference_mode():
        for r in range(rounds + 1):  # the first round warms up
            for arm in (("body", "forward") if r % 2 else ("forward", "body")):
                start = time.process_time()
                for t in tiles:
                    if arm == "body":
                        with attention_bypassed(net):
                            net(t)
                    else:
                        net(t)
                if r:
                    times[arm].append((time.process_time() - start) / (len(tiles) * side * side))
    per_px = {arm: statistics.median(v) for arm, v in times.items()}
    return {"model": f"{family}-x2", "dtype": str(dtype).removeprefix("torch."), "tile": side,
            "body_us_per_px": per_px["body"] * 1e6, "forward_us_per_px": per_px["forward"] * 1e6,
            "body_s": per_px["body"] * img.width * img.height, "pixels": img.width * img.height}


_written: set[tuple[str, Path, int, int]] = set()  # mosaics this process wrote: --what big,stages share one


def mosaic_jpeg(args: argparse.Namespace, path: Path, width: int, height: int) -> Path:
    """The valid images' mosaic of width x height written to ``path`` as a quality 90 JPEG (once per
    process for the same folder, path and size)."""
    from PIL import Image

    key = (str(Path(args.valid).resolve()), path.resolve(), width, height)
    if key in _written and path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(mosaic(valid_images(Path(args.valid)), width, height)).save(path, quality=90)
    _written.add(key)
    return path


def big(args: argparse.Namespace, work: Path) -> dict:
    jpeg = mosaic_jpeg(args, work / "in" / "big-4000x3000.jpg", 4000, 3000)
    small = mosaic_jpeg(args, work / "in12" / "mid-2000x1500.jpg", 2000, 1500)
    job = run_sr([str(jpeg), "-o", str(work / "out"), "-f", "jpg", "-v", "--overwrite"])
    print(job["out"].strip())
    body = body_time(jpeg, args.body_rounds)
    mid = run_sr([str(small), "-o", str(work / "out12"), "-f", "jpg", "--overwrite"])
    result = {
        "job_cpu_s": job["cpu_s"], "job_wall_s": job["wall_s"], "job_batch_s": job["batch_s"],
        "job_peak_rss_mb": job["peak_rss_bytes"] / 2**20, **body,
        "cpu_ratio": job["cpu_s"] / body["body_s"], "batch_ratio": job["batch_s"] / body["body_s"],
        "mid_peak_rss_mb": mid["peak_rss_bytes"] / 2**20, "mid_batch_s": mid["batch_s"],
    }
    print(f"4000x3000 JPEG -> x2, -f jpg, defaults ({body['model']}, {body['dtype']}, tile {body['tile']}): "
          f"batch {job['batch_s']:.1f} s, process CPU {job['cpu_s']:.1f} s, wall {job['wall_s']:.1f} s, "
          f"peak RSS {result['job_peak_rss_mb']:.0f} MiB")
    print(f"conv body for its {body['pixels'] / 1e6:.0f} MP: {body['body_s']:.1f} s CPU "
          f"({body['body_us_per_px']:.3f} us/px; whole network {body['forward_us_per_px']:.3f} us/px); "
          f"job / conv body: {result['cpu_ratio']:.2f}x (CPU), {result['batch_ratio']:.2f}x (batch time)")
    print(f"2000x1500 JPEG -> x2 (12 MP out): batch {mid['batch_s']:.1f} s, "
          f"peak RSS {result['mid_peak_rss_mb']:.0f} MiB")
    if args.compare_tile:
        fixed = run_sr([str(jpeg), "-o", str(work / "out-tile"), "-f", "jpg", "--overwrite",
                        "--tile", str(args.compare_tile)])
        result.update(tile_cpu_s=fixed["cpu_s"], tile_batch_s=fixed["batch_s"],
                      tile_peak_rss_mb=fixed["peak_rss_bytes"] / 2**20)
        print(f"the same job with --tile {args.compare_tile}: batch {fixed['batch_s']:.1f} s, process CPU "
              f"{fixed['cpu_s']:.1f} s, peak RSS {result['tile_peak_rss_mb']:.0f} MiB; auto is "
              f"{fixed['cpu_s'] / job['cpu_s']:.2f}x faster (CPU)")
    return result


def stages(args: argparse.Namespace, work: Path) -> dict:
    """The 4000x3000 job's CPU time by stage, in this process on one thread
    (:mod:`research.pipeline_stages`)."""
    from .pipeline_stages import breakdown, rows

    jpeg = mosaic_jpeg(args, work / "in" / "big-4000x3000.jpg", 4000, 3000)
    b = breakdown(jpeg, work / "out-stages")
    table = rows(b)
    total = sum(v for label, v in table if not label.startswith(" "))
    print(f"4000x3000 JPEG -> x2, -f jpg, defaults ({b['ran']}, tile {b['tile']}, {b['tiles']} tiles), "
          f"one thread, CPU seconds by stage (set-up {b['seconds']['set-up']:.1f} s not counted):")
    for label, v in table:
        print(f"  {label:<66} {v:7.2f} s {v / total:6.1%}")
    print(f"  {'total':<66} {total:7.2f} s")
    print("peak RSS by stage: " + ", ".join(f"{k} {v:.0f} MiB" for k, v in b["peak_rss_mb"].items()))
    return {**b, "rows": table, "total_s": total}


def precision(args: argparse.Namespace, work: Path) -> dict:
    files = valid_images(Path(args.valid))[: args.images]
    src = work / "valid"
    src.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        f.unlink()
    for f in files:
        (src / f.name).symlink_to(f.resolve())
    trees: dict[str, Path | None] = {"this tree": None}
    if args.baseline is not None:
        trees["baseline"] = Path(args.baseline).resolve()
    configs = [(t, s, p) for s in (2, 4) for p in ("bf16", "fp32") for t in trees]
    times: dict[tuple[str, int, str], list[float]] = {c: [] for c in configs}
    cpu: dict[tuple[str, int, str], list[float]] = {c: [] for c in configs}
    stage_sums: dict[tuple[str, int, str], list[list[float]]] = {c: [] for c in configs}

    def command(s: int, p: str, *extra: str) -> list[str]:
        return [str(src), "-o", str(work / f"out-x{s}-{p}"), "--model", "asa-base", "-s", str(s),
                "--precision", p, "--overwrite", *extra]

    # the interpreter's start-up, imports and planning: the same command as a dry run, subtracted
    # from each run's CPU time so that the ratio is the batch's own
    startup = {(t, s, p): run_sr(command(s, p, "-n"), trees[t])["cpu_s"] for t, s, p in configs}
    for r in range(args.rounds):
        for t, s, p in (configs if r % 2 == 0 else list(reversed(configs))):
            res = run_sr(command(s, p, "-v"), trees[t])
            times[(t, s, p)].append(res["batch_s"])
            stage_sums[(t, s, p)].append(res["stages_s"])
            cpu[(t, s, p)].append(res["cpu_s"] - startup[(t, s, p)])
            print(f"round {r + 1}: {t}: x{s} {p}: batch {res['batch_s']:.1f} s, CPU {res['cpu_s']:.1f} s "
                  f"(start-up {startup[(t, s, p)]:.1f} s); decode/upscale/encode summed {res['stages_s']} s",
                  flush=True)
    result: dict = {}
    for t in trees:
        figures = result if t == "this tree" else result.setdefault("baseline", {"tree": str(trees[t])})
        for s in (2, 4):
            med = {p: statistics.median(times[(t, s, p)]) for p in ("bf16", "fp32")}
            med_cpu = {p: statistics.median(cpu[(t, s, p)]) for p in ("bf16", "fp32")}
            med_up = {p: statistics.median(v[1] for v in stage_sums[(t, s, p)]) for p in ("bf16", "fp32")}
            bf, fp = med["bf16"], med["fp32"]
            figures[f"x{s}"] = {
                "bf16_s": bf, "fp32_s": fp, "speedup": fp / bf, "bf16_cpu_s": med_cpu["bf16"],
                "fp32_cpu_s": med_cpu["fp32"], "cpu_speedup": med_cpu["fp32"] / med_cpu["bf16"],
                "bf16_upscale_s": med_up["bf16"], "fp32_upscale_s": med_up["fp32"],
                "upscale_speedup": med_up["fp32"] / med_up["bf16"],
            }
            print(f"{t}: x{s}, {len(files)} valid images, asa-base: batch bf16 {bf:.2f} s, fp32 {fp:.2f} s: "
                  f"bf16 {fp / bf:.2f}x fp32; CPU less start-up: bf16 {med_cpu['bf16']:.1f} s, "
                  f"fp32 {med_cpu['fp32']:.1f} s: {med_cpu['fp32'] / med_cpu['bf16']:.2f}x; upscale stage "
                  f"alone (-v): bf16 {med_up['bf16']:.1f} s, fp32 {med_up['fp32']:.1f} s: "
                  f"{med_up['fp32'] / med_up['bf16']:.2f}x")
    return result


def run(args: argparse.Namespace) -> int:
    what = {w.strip() for w in args.what.split(",") if w.strip()}
    if not what or what - {"big", "stages", "precision"}:
        raise CLIError(f"--what must name big, stages and/or precision, got {args.what!r}")
    if not Path(args.valid).is_dir():
        raise CLIError(f"--valid {args.valid}: not a folder")
    if args.images < 1 or args.rounds < 1 or args.body_rounds < 1:
        raise CLIError("--images, --rounds and --body-rounds must be >= 1")
    if args.baseline is not None and not (Path(args.baseline) / "sr" / "__main__.py").is_file():
        raise CLIError(f"--baseline {args.baseline}: not a source tree of sr (no sr/__main__.py)")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    figures = {}
    if "stages" in what:  # first: it runs in this process, before big's conv body timing loads more
        figures["stages"] = stages(args, work)
    if "big" in what:
        figures["big"] = big(args, work)
    if "precision" in what:
        figures["precision"] = precision(args, work)
    if args.json:
        write_json(args.json, figures)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, "research.pipeline")


if __name__ == "__main__":
    raise SystemExit(main())
