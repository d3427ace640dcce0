"""``sr upscale INPUT... -o OUTDIR``: upscale files, folders and globs with a prefetching pipeline.

Reading the next image and writing the previous one run in their own threads around the model
(reader -> queue -> model -> queue -> writer), so the model does not wait on decoding or encoding.
A bad file is reported with its path and the batch goes on; the exit code is 1 if anything failed.
Outputs are written atomically (``sr.io.write_image``), so Ctrl-C never leaves a partial file, and
no output may land on an input file.

``--ray [ADDRESS]`` runs the same jobs on Ray Data (``sr.inference.ray_batch``, imported only then):
listing, planning, reading, upscaling and writing are the functions below, called from Ray's tasks and
actors instead of this module's threads, so both paths write the same files and report the same errors.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import queue
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import AUTO_MODEL, DEFAULT_CHOICE, DEFAULT_MODEL, PHOTO_MODEL
from ..errors import CLIError
from .precision import add_precision_argument

if TYPE_CHECKING:  # annotations only: the command imports the engine lazily
    from tqdm import tqdm

    from ..inference import Upscaler, UpscaleResult
    from ..inference.tiling import ProgressFn
    from ..io import DecodedImage

_DONE = object()  # end-of-stream marker between the pipeline threads
# Inputs of at least this many pixels get a second bar that advances per tile: at x2 on a CPU such
# an image takes tens of seconds, and a batch bar that stands still that long looks hung.
TILE_BAR_PIXELS = 4_000_000


def format_choices() -> tuple[str, ...]:
    """``-f`` choices: sr.io's writable formats by the names users type, and "same"."""
    from ..io import output_choices

    return (*output_choices(), "same")


def same_format(src: Path) -> str:
    """``-f same``: the input's format when sr.io writes it (by its suffix), else png."""
    from ..io import FORMATS

    suffix = src.suffix.lower()
    return next((f.user_name for f in FORMATS.values() if f.writable and suffix in f.suffixes), "png")


def denoise_arg(text: str) -> float:
    """argparse type of ``--denoise``: a number from 0 to 1 (a bad value exits 2 with the reason)."""
    from ..inference import parse_denoise

    try:
        return parse_denoise(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..inference import ALPHA_MODES, DEFAULT_TILE_OVERLAP
    from ..io import DEFAULT_MAX_PIXELS

    p.add_argument("inputs", nargs="+", metavar="INPUT", help="image files, folders or glob patterns")
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR",
                   help="output folder (created if missing)")
    p.add_argument("-r", "--recursive", action="store_true",
                   help="scan folders recursively, keeping the sub-folder tree in OUTDIR (and ** in globs)")
    family = f"weights/{DEFAULT_CHOICE}-x{{2,3,4}}" if DEFAULT_CHOICE != AUTO_MODEL else "see auto below"
    p.add_argument("-m", "--model", default=DEFAULT_CHOICE,
                   help=f"shipped model family (default {DEFAULT_CHOICE}: {family}; {PHOTO_MODEL}: "
                        "fine-tuned on blurred, noisy, JPEG-compressed inputs), a full name "
                        f"({DEFAULT_MODEL}-x2), a .safetensors file, or '{AUTO_MODEL}': per input file, "
                        f"{PHOTO_MODEL} for lossy files (JPEG, lossy WebP) and {DEFAULT_MODEL} for the rest, "
                        "read from the file itself")
    p.add_argument("--denoise", type=denoise_arg, default=None, metavar="D",
                   help=f"0..1, with --model {PHOTO_MODEL} or {AUTO_MODEL} only: run {PHOTO_MODEL} "
                        f"blended with {DEFAULT_MODEL} of the same scale, every weight "
                        f"(1-D)*{DEFAULT_MODEL} + D*{PHOTO_MODEL} (0 = {DEFAULT_MODEL} exactly; default "
                        f"1 = {PHOTO_MODEL} as trained; {AUTO_MODEL}'s lossless inputs always get "
                        f"{DEFAULT_MODEL})")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each written file with the model it got (with auto: why)")
    size = p.add_argument_group("output size (default: the model's smallest scale)")
    size.add_argument("-s", "--scale", type=int, choices=(2, 3, 4), help="model scale to use")
    size.add_argument("--outscale", type=float, metavar="S",
                      help="final scale, any number > 0 (e.g. 1.5, 3.7, 8): model passes, then bicubic")
    size.add_argument("--width", type=int,
                      help="output width in pixels (height follows the aspect unless given)")
    size.add_argument("--height", type=int,
                      help="output height in pixels (width follows the aspect unless given)")
    p.add_argument("--tile", default="auto",
                   help="tile size in input pixels: 'auto' (from free memory), 0 = whole image, or e.g. 256")
    p.add_argument("--tile-overlap", type=int, default=DEFAULT_TILE_OVERLAP, metavar="PX",
                   help=f"overlap between tiles in input pixels (default {DEFAULT_TILE_OVERLAP})")
    p.add_argument("--device", default="auto",
                   help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for the model (default: usable CPUs)")
    p.add_argument("--attention-path", default="auto", choices=("auto", "tiered", "static"),
                   help="routed attention at inference: tiered (compute follows the budget; fastest on "
                        "CPU), static (fixed shapes, no host syncs; GPUs); auto = tiered on CPU only")
    add_precision_argument(p)
    p.add_argument("--compile", action="store_true",
                   help="run the network through torch.compile (static path; the first tile of each "
                        "run pays the compilation; measured by sr bench paths)")
    written = "/".join(format_choices()[:-1])
    p.add_argument("-f", "--format", default="png", choices=format_choices(),
                   help=f"output format; 'same' keeps {written} inputs' format (others become png)")
    p.add_argument("--quality", type=int, default=95, help="JPEG/WebP quality 1-100 (default 95)")
    p.add_argument("--suffix", default=None,
                   help="added to output names (default: _x<scale>, e.g. _x2 or _x1.5; _w<W>/_h<H>/_<W>x<H> "
                        "with --width/--height); '' keeps the input name")
    p.add_argument("--tta", action="store_true",
                   help="quality mode: average the model over the 8 flips/rotations (sharper, 8x slower; "
                        "gain: the README's results table)")
    p.add_argument("--alpha-mode", default="bicubic", choices=ALPHA_MODES,
                   help="alpha channel: bicubic resize, or through the model as gray (default bicubic)")
    exist = p.add_mutually_exclusive_group()
    exist.add_argument("--skip-existing", action="store_true",
                       help="skip images whose output exists (resume a batch)")
    exist.add_argument("--overwrite", action="store_true", help="replace existing outputs (default: error)")
    p.add_argument("-n", "--dry-run", action="store_true", help="list what would be written; write nothing")
    p.add_argument("--save-budget-map", action="store_true",
                   help="also write <output name>_budget.png: the attention-budget heat-map at output size "
                        "(inferno, black = no attention, pale yellow = the model's k_max regions)")
    p.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS,
                   help=f"refuse inputs with more pixels than this (default {DEFAULT_MAX_PIXELS})")
    cluster = p.add_argument_group("Ray (pip install 'sr[cluster]'; docs/cluster.md)")
    cluster.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                         help="run on Ray Data: a local Ray without ADDRESS (or RAY_ADDRESS), else join "
                              "the cluster at ADDRESS (e.g. 10.0.0.1:6379 or auto)")
    cluster.add_argument("--ray-actors", type=int, default=None, metavar="N",
                         help="upscaling actors, one model each (default: one per GPU of the cluster, "
                              "else its CPUs / --threads)")


@dataclass
class Job:
    src: Path
    rel: Path  # output path relative to OUTDIR, before suffix and extension
    out: Path | None = None
    budget: Path | None = None
    problem: str | None = None  # known before reading: missing, collision, output exists
    skip: bool = False


def collect_inputs(inputs: list[str], recursive: bool, outdir: Path | None = None) -> list[Job]:
    """Files, folders and globs -> jobs in a stable order (duplicates dropped). Folder scans skip
    hidden files and anything inside ``outdir`` (earlier outputs are not new inputs)."""
    from ..io import read_suffixes

    suffixes = read_suffixes()  # picked up when scanning folders (files named explicitly are always tried)
    out_resolved = outdir.resolve() if outdir is not None else None
    jobs: list[Job] = []
    seen: set[Path] = set()

    def add(src: Path, rel: Path, problem: str | None = None) -> None:
        key = src.resolve() if problem is None else src
        if key not in seen:
            seen.add(key)
            jobs.append(Job(src, rel, problem=problem))

    def scan(folder: Path) -> None:
        found = folder.rglob("*") if recursive else folder.iterdir()
        nested_out = out_resolved is not None and folder.resolve() in out_resolved.parents
        for f in sorted(found):
            rel = f.relative_to(folder)
            hidden = any(part.startswith(".") for part in rel.parts)  # incl. our own temp files
            if nested_out and out_resolved in f.resolve().parents:
                continue
            if f.is_file() and not hidden and f.suffix.lower() in suffixes:
                add(f, rel if recursive else Path(f.name))

    for item in inputs:
        path = Path(item).expanduser()
        if path.is_file():
            add(path, Path(path.name))
        elif path.is_dir():
            scan(path)
        elif glob.has_magic(item):
            for match in sorted(glob.glob(item, recursive=recursive)):
                m = Path(match)
                if m.is_file():
                    add(m, Path(m.name))
                elif m.is_dir():
                    scan(m)
        else:
            add(path, Path(path.name), problem="no such file or folder")
    return jobs


def default_suffix(args: argparse.Namespace, default_scale: int) -> str:
    if args.outscale is not None:
        return f"_x{args.outscale:g}"
    if args.width is not None and args.height is not None:
        return f"_{args.width}x{args.height}"
    if args.width is not None:
        return f"_w{args.width}"
    if args.height is not None:
        return f"_h{args.height}"
    return f"_x{args.scale or default_scale}"


def plan_outputs(jobs: list[Job], outdir: Path, fmt: str, suffix: str, args: argparse.Namespace) -> None:
    """Fill each job's output path and decide skip/problem; refuse any output that is an input."""
    from ..io import suffix_for

    inputs = {j.src.resolve(): j.src for j in jobs if j.problem is None}
    taken: dict[Path, Path] = {}
    for job in jobs:
        if job.problem is not None:
            continue
        out_fmt = same_format(job.src) if fmt == "same" else fmt
        job.out = outdir / job.rel.parent / f"{job.rel.stem}{suffix}{suffix_for(out_fmt)}"
        job.budget = job.out.with_name(f"{job.out.stem}_budget.png") if args.save_budget_map else None
        for target in (job.out, job.budget):
            if target is not None and target.resolve() in inputs:
                raise CLIError(
                    f"refusing to run: {target} would overwrite the input {inputs[target.resolve()]}; "
                    "choose another output folder or --suffix"
                )
        key = job.out.resolve()
        if key in taken:
            job.problem = f"output {job.out} is also the output of {taken[key]}"
            continue
        taken[key] = job.src
        exists = job.out.exists() or (job.budget is not None and job.budget.exists())
        if exists and args.skip_existing:
            job.skip = True
        elif exists and not args.overwrite:
            job.problem = f"output {job.out} exists (use --overwrite or --skip-existing)"


class Stats:
    """Counters shared by the pipeline threads, and the progress bar they update."""

    def __init__(self, total: int, verbose: bool = False) -> None:
        from tqdm import tqdm

        self.lock = threading.Lock()
        self.done = self.failed = 0
        self.out_pixels = 0
        self.warned = False
        self.verbose = verbose
        self.chosen: Counter[str] = Counter()  # model="auto": files per family chosen
        self.bar = tqdm(total=total, unit="img", disable=None, file=sys.stderr, dynamic_ncols=True)

    def fail(self, path: Path, reason: str) -> None:
        with self.lock:
            self.failed += 1
            self.bar.write(f"sr upscale: {path}: {reason}", file=sys.stderr)
            self.bar.update(1)

    def ok(self, pixels: int) -> None:
        with self.lock:
            self.done += 1
            self.out_pixels += pixels
            self.bar.update(1)

    def record(self, job: Job, written: Written) -> None:
        """Count one written (or failed) job; the no-budget-map warning is printed once."""
        if written.no_budget_map and not self.warned:
            self.warned = True
            self.bar.write(NO_BUDGET_MAPS, file=sys.stderr)
        if written.problem is not None:
            self.fail(job.src, written.problem)
            return
        with self.lock:
            if written.chosen:
                self.chosen[written.chosen] += 1
            if self.verbose:
                self.bar.write(f"{job.src} -> {job.out} ({written.choice or written.model})", file=sys.stdout)
        self.ok(written.pixels)


def _put(q: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Blocking put that gives up when ``stop`` is set (so a stopped consumer cannot hang us)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def read_input(job: Job, max_pixels: int) -> tuple[DecodedImage | None, str | None]:
    """Decode a job's input: (DecodedImage, None), or (None, the reason to report). Both pipelines."""
    from ..io import read_image

    try:
        return read_image(job.src, max_pixels=max_pixels), None
    except Exception as e:  # noqa: BLE001 - any failure is this file's: reported, the batch goes on
        return None, getattr(e, "reason", None) or str(e)


def upscale_input(
    up: Upscaler, image: DecodedImage, args: argparse.Namespace, source: Path | None = None,
    progress: ProgressFn | None = None,
) -> tuple[UpscaleResult | None, str | None]:
    """Upscale one decoded image with the command's flags: (UpscaleResult, None) or (None, reason).
    ``source``: the input file, from which ``--model auto`` reads its compression. The result holds
    8/16-bit samples (``quantize``): what the writer encodes, in a quarter of float32's memory."""
    from ..inference import UpscaleError

    try:
        return up.upscale(image, scale=args.scale, outscale=args.outscale, width=args.width,
                          height=args.height, alpha_mode=args.alpha_mode,
                          with_budget_map=args.save_budget_map, tta=args.tta, source=source,
                          quantize=True, progress=progress), None
    except UpscaleError as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 - e.g. out of memory on a huge image: next file
        return None, f"upscaling failed ({type(e).__name__}: {e})"


@dataclass
class Written:
    """What writing one job's output gave: output pixels on success, else the reason."""

    pixels: int = 0
    problem: str | None = None
    no_budget_map: bool = False  # --save-budget-map asked, but the model has no adaptive attention
    model: str = ""   # the model that ran, e.g. "photo-x2"
    chosen: str = ""  # --model auto: the family this file got ("photo"), else ""
    choice: str = ""  # --model auto: what was chosen and why ("auto: photo (JPEG, quality ~72)")


def write_output(job: Job, result: UpscaleResult, args: argparse.Namespace, k_max: float | None) -> Written:
    """Encode and atomically write one job's output (and budget map). Both pipelines use it."""
    import numpy as np

    from ..inference import budget_heatmap
    from ..io import DecodedImage, ImageError, write_image

    no_map = False
    try:
        job.out.parent.mkdir(parents=True, exist_ok=True)
        if job.out.exists() and not (args.overwrite or args.skip_existing):
            raise FileExistsError(f"output {job.out} appeared meanwhile (use --overwrite)")
        out_fmt = same_format(job.src) if args.format == "same" else args.format
        write_image(job.out, result.image, out_fmt, args.quality)
        if job.budget is not None and result.budget_map is not None:
            heat = budget_heatmap(result.budget_map, k_max).astype(np.float32) / 255
            write_image(job.budget, DecodedImage(heat), "png")
        elif job.budget is not None:
            no_map = True
    except (ImageError, OSError) as e:
        return Written(problem=str(e))
    except Exception as e:  # noqa: BLE001 - a dead writer would hang the batch: report and go on
        return Written(problem=f"writing failed ({type(e).__name__}: {e})")
    choice = result.choice
    return Written(result.image.width * result.image.height, no_budget_map=no_map, model=result.model,
                   chosen=choice.model if choice is not None else "",
                   choice=choice.describe() if choice is not None else "")


NO_BUDGET_MAPS = "sr upscale: the model has no adaptive attention: no budget maps"


def tile_bar(job: Job, image: DecodedImage) -> tqdm | None:
    """A per-tile bar under the batch bar for a large input (hidden when stderr is not a terminal)."""
    from tqdm import tqdm

    if image.width * image.height < TILE_BAR_PIXELS:
        return None
    return tqdm(total=1, unit="tile", desc=job.src.name, leave=False, position=1, disable=None,
                file=sys.stderr, dynamic_ncols=True)


def tile_progress(bar: tqdm) -> ProgressFn:
    """The engine's progress callback, drawn on ``bar`` (a chained model pass starts it again)."""

    def update(done: int, total: int) -> None:
        if total != bar.total or done < bar.n:
            bar.reset(total=total)
        bar.update(done - bar.n)

    return update


def _reader(jobs: list[Job], q: queue.Queue, stop: threading.Event, max_pixels: int) -> None:
    for job in jobs:
        if stop.is_set():
            return
        if not _put(q, (job, read_input(job, max_pixels)), stop):
            return
    _put(q, _DONE, stop)


def _writer(q: queue.Queue, stats: Stats, args: argparse.Namespace, k_max: float | None) -> None:
    while True:
        item = q.get()
        if item is _DONE:
            return
        job, result = item
        written = write_output(job, result, args, k_max)
        stats.record(job, written)


def _parse_tile(text: str) -> int | str:
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise CLIError(f"--tile must be 'auto', 0 or a number of pixels, got {text!r}") from None
    if value < 0:
        raise CLIError(f"--tile must be 'auto', 0 or a number of pixels, got {text!r}")
    return value


def _validate(args: argparse.Namespace) -> None:
    if args.outscale is not None and (args.width is not None or args.height is not None):
        raise CLIError("give either --outscale or --width/--height, not both")
    if args.outscale is not None and not (args.outscale > 0 and args.outscale < float("inf")):
        raise CLIError(f"--outscale must be a number > 0, got {args.outscale}")
    for name in ("width", "height"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise CLIError(f"--{name} must be a positive number of pixels, got {v}")
    if not 1 <= args.quality <= 100:
        raise CLIError(f"--quality must be 1-100, got {args.quality}")
    if args.max_pixels < 1:
        raise CLIError(f"--max-pixels must be positive, got {args.max_pixels}")
    if args.tile_overlap < 0:
        raise CLIError(f"--tile-overlap must be >= 0, got {args.tile_overlap}")
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be >= 1, got {args.threads}")
    if args.suffix is not None and any(c in args.suffix for c in "/\\"):
        raise CLIError("--suffix must not contain path separators")
    if args.denoise is not None:
        from ..inference import DENOISE_MODELS, takes_denoise

        if not takes_denoise(args.model):
            raise CLIError(f"--denoise applies only to --model {' or '.join(DENOISE_MODELS)}, "
                           f"not {args.model!r}")


def make_upscaler(
    args: argparse.Namespace, device: str | None = None, threads: int | None = None
) -> Upscaler:
    """The command's ``Upscaler`` (also built once per Ray actor, from the same flags)."""
    from ..inference import Upscaler

    return Upscaler(args.model, device=device or args.device, tile=_parse_tile(args.tile),
                    tile_overlap=args.tile_overlap, threads=threads if threads is not None else args.threads,
                    attention_path=args.attention_path, compile=args.compile, denoise=args.denoise,
                    precision=args.precision)


def run(args: argparse.Namespace) -> int:
    _validate(args)
    _parse_tile(args.tile)
    ray = getattr(args, "ray", None)
    if ray is not None:
        from ..inference import ray_batch  # only here: the local path never imports Ray

        ray_batch.check_installed()
        ray_batch.validate(args)
    from ..inference import UpscaleError

    try:
        # With --ray this one only checks the model and scale on the driver (weights load lazily, the
        # device is the actors'): the CPU is always there.
        up = make_upscaler(args, device="cpu" if ray is not None else None,
                           threads=1 if ray is not None else None)
        if args.scale is not None:
            up.plan(1, 1, scale=args.scale)  # checks that the model has this scale
    except UpscaleError as e:
        raise CLIError(str(e)) from None
    outdir = Path(args.output).expanduser()
    if outdir.exists() and not outdir.is_dir():
        raise CLIError(f"output {outdir} exists and is not a folder")
    jobs = collect_inputs(args.inputs, args.recursive, outdir)
    if not jobs:
        raise CLIError("no input images found")
    suffix = args.suffix if args.suffix is not None else default_suffix(args, min(up.scales))
    plan_outputs(jobs, outdir, args.format, suffix, args)
    todo = [j for j in jobs if j.problem is None and not j.skip]
    skipped = sum(j.skip for j in jobs)
    if args.dry_run:
        return _dry_run(jobs, todo, skipped, up)
    # Ray first (an unreachable cluster is an error before anything is created); its start-up lines
    # then come before the progress bar. The session stops a Ray it started, whatever happens.
    session = ray_batch.connect(ray) if ray is not None else contextlib.nullcontext()
    with session:
        if ray is not None:
            ray_batch.check_cluster(args)  # enough CPUs/GPUs for the actors, before anything is made
        try:
            outdir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CLIError(f"cannot create output folder {outdir} ({e.strerror or e})") from None
        stats = Stats(len(todo), verbose=args.verbose)
        for job in jobs:
            if job.problem is not None:
                stats.bar.write(f"sr upscale: {job.src}: {job.problem}", file=sys.stderr)
        stats.failed = sum(j.problem is not None for j in jobs)
        start = time.perf_counter()
        try:
            if ray is not None:
                ray_batch.run_pipeline(todo, stats, args, up.k_max)
            else:
                _pipeline(up, todo, stats, args)
        except KeyboardInterrupt:
            stats.bar.close()
            _summary(stats, skipped, time.perf_counter() - start, interrupted=True)
            raise
    stats.bar.close()
    _summary(stats, skipped, time.perf_counter() - start)
    return 1 if stats.failed else 0


def _pipeline(up, todo: list[Job], stats: Stats, args: argparse.Namespace) -> None:
    stop = threading.Event()
    # One slot each way is enough to keep the model busy (the next image decodes and the previous one
    # encodes while it runs) and bounds memory to ~3 images in flight: outputs can be gigabytes.
    q_in: queue.Queue = queue.Queue(maxsize=1)
    q_out: queue.Queue = queue.Queue(maxsize=1)
    reader = threading.Thread(target=_reader, args=(todo, q_in, stop, args.max_pixels), daemon=True)
    writer = threading.Thread(target=_writer, args=(q_out, stats, args, up.k_max), daemon=True)
    reader.start()
    writer.start()
    try:
        while True:
            item = q_in.get()
            if item is _DONE:
                break
            job, (image, problem) = item
            del item
            if problem is None:
                bar = tile_bar(job, image)
                try:
                    progress = tile_progress(bar) if bar is not None else None
                    result, problem = upscale_input(up, image, args, source=job.src, progress=progress)
                finally:
                    if bar is not None:
                        bar.close()
            del image
            if problem is not None:
                stats.fail(job.src, problem)
                continue
            q_out.put((job, result))
            del result
        q_out.put(_DONE)
        writer.join()
    except KeyboardInterrupt:
        # Stop reading, drop results not yet written, let the writer finish its current (atomic)
        # file, then re-raise: the CLI reports the interruption and exits 130.
        stop.set()
        with q_out.mutex:
            q_out.queue.clear()
            q_out.not_full.notify_all()
        q_out.put(_DONE)
        writer.join()
        raise


def _dry_run(jobs: list[Job], todo: list[Job], skipped: int, up: Upscaler | None = None) -> int:
    for job in jobs:
        if job.problem is not None:
            print(f"{job.src}: error: {job.problem}")
        elif job.skip:
            print(f"{job.src} -> {job.out} (exists, skipped)")
        else:
            extra = f" + {job.budget}" if job.budget is not None else ""
            choice = up.choose(job.src) if up is not None else None  # auto: read from the file's header
            extra += f" ({choice.describe()})" if choice is not None else ""
            print(f"{job.src} -> {job.out}{extra}")
    problems = sum(j.problem is not None for j in jobs)
    print(f"dry run: {len(todo)} to write, {skipped} skipped, {problems} with errors; nothing written")
    return 1 if problems else 0


def _summary(stats: Stats, skipped: int, seconds: float, interrupted: bool = False) -> None:
    rate = stats.out_pixels / 1e6 / seconds if seconds > 0 else 0.0
    head = "interrupted: " if interrupted else ""
    print(f"{head}{stats.done} done, {skipped} skipped, {stats.failed} failed in {seconds:.1f} s "
          f"({rate:.2f} output MP/s)")
    if stats.chosen:
        counts = ", ".join(f"{family} for {n} file{'s' if n != 1 else ''}"
                           for family, n in sorted(stats.chosen.items()))
        print(f"{AUTO_MODEL}: {counts}" + ("" if stats.verbose else " (-v lists each file)"))
