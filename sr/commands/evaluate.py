"""``sr eval``: PSNR/SSIM of bicubic or a model on folders of HR images (the protocol in
:mod:`sr.evaluation`), printed as a table and optionally written as JSON/CSV, with the SR images.

Everything that can be checked before scoring (folders, LR/HR pairing and sizes, weights, scale,
output paths) is checked first, so a bad invocation fails fast and writes nothing.

``--degrade LEVEL[,LEVEL...]|all`` scores degraded sets instead of the bicubic LR: for each HR folder
and level the seeded set of :mod:`sr.evaluation.degraded` is built in (or reused from) ``--degrade-dir``
(default ``runs/degraded``, the layout of ``sr degrade -o``) and scored as ``--lr`` folders against
the clean HR, with a "blind mean" row (mild/medium/heavy) per HR folder.

``--metrics psnr,ssim,haarpsi,cvvdp,brisque,lattice`` adds perceptual metrics
(:mod:`sr.evaluation.perceptual`; all but lattice from the optional extra ``.[perceptual]``) as columns
of every table and file; they are parsed and their packages imported before any folder is read or the
model loaded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..errors import CLIError
from .precision import add_precision_argument
from .weights_dir import add_weights_dir_argument, checked_weights_dir

if TYPE_CHECKING:
    import torch

    from ..evaluation import BlindMean, DegradedTarget, SetPlan, SetResult, UpscaleFn

# Lazy imports below keep argument errors torch-free: `sr eval --hr x --scale 99` fails in 0.2 s,
# where importing sr.evaluation (torch) costs ~1.5 s of CPU.
MAX_BICUBIC_SCALE = 8
DEFAULT_DEGRADE_DIR = "runs/degraded"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hr", nargs="+", required=True, metavar="DIR", help="folders of HR images, one set each")
    p.add_argument(
        "--lr", nargs="+", metavar="DIR",
        help="LR folders, one per --hr, matched by file stem (default: MATLAB-bicubic LR made from HR)",
    )
    p.add_argument(
        "--degrade", metavar="LEVEL",
        help="score seeded degraded LR sets instead: web, mild, medium, heavy, chain, a comma list or all "
             "(built once into --degrade-dir, as `sr degrade` builds them; not with --lr)",
    )
    p.add_argument("--degrade-seed", type=int, default=None, metavar="N",
                   help="seed of the degraded sets (default: 2026, as `sr degrade`)")
    p.add_argument("--degrade-dir", default=None, metavar="DIR",
                   help=f"where degraded sets are built and reused (default: {DEFAULT_DEGRADE_DIR}, "
                        "relative to the current folder)")
    p.add_argument("--scale", type=int, required=True, help="upscaling factor (models: 2, 3 or 4)")
    p.add_argument(
        "--model", default="bicubic",
        help="'bicubic' (default), a shipped family (asa-base: its --scale model), a model name "
             "(asa-base-x2) or a .safetensors weights file",
    )
    add_weights_dir_argument(p)
    p.add_argument("--channel", choices=("y", "rgb"), default="y", help="score Y (default) or RGB")
    p.add_argument(
        "--gray-as-rgb", action="store_true",
        help="score gray HR images as RGB (replicated, then Y) instead of on their gray values",
    )
    p.add_argument(
        "--metrics", metavar="LIST",
        help="comma list of psnr, ssim (always scored), haarpsi, cvvdp, cvvdp-zoom, brisque, lattice: "
             "perceptual metrics on the RGB output as extra columns (all but lattice need the "
             "perceptual extra; docs/evaluation.md)",
    )
    p.add_argument("--json", metavar="FILE", help="write per-image and per-set results as JSON")
    p.add_argument("--csv", metavar="FILE", help="write per-image and per-set results as CSV")
    p.add_argument("--save", metavar="DIR", help="save SR images as PNG under DIR/<set>/")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, mps")
    add_precision_argument(p, default="fp32", note=" (fp32 is the protocol; compare a bf16 run "
                                                   "with it to measure bf16's cost)")
    p.add_argument("--budget", type=float, metavar="K",
                   help="adaptive attention: mean key regions per query region at inference (0 = skip "
                        "attention; default: as trained)")
    p.add_argument("--tta", action="store_true",
                   help="score the x8 geometric self-ensemble of the model (the '+' rows of SR papers)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the per-set means")


# -- planning ---------------------------------------------------------------------------------------


def _check_output(path: str | None, flag: str) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise CLIError(f"{flag} {p} is a folder; give a file name")
    if p.parent.exists() and not p.parent.is_dir():
        raise CLIError(f"{flag} {p}: {p.parent} is not a folder")
    return p


def pick_device(name: str) -> torch.device:
    """The engine's device resolution (auto = CUDA, MPS, CPU), its errors as CLI messages."""
    from ..inference.devices import DeviceError, resolve_device

    try:
        return resolve_device(name)
    except DeviceError as e:
        raise CLIError(str(e)) from None


def parse_metric_choice(text: str | None) -> tuple[str, ...]:
    """``--metrics`` as the perceptual metrics to add (none when not given or only psnr/ssim), each
    one's package imported now: an unknown name or a missing package is a CLIError."""
    if text is None:
        return ()
    from ..evaluation.perceptual import PerceptualUnavailable, parse_metrics

    try:
        return parse_metrics(text)
    except (ValueError, PerceptualUnavailable) as e:
        raise CLIError(f"--metrics: {e}") from None


# -- printing ---------------------------------------------------------------------------------------

# table headers of the perceptual metrics (--json/--csv use the metric names)
HEADERS = {"haarpsi": "HaarPSI", "cvvdp": "CVVDP", "brisque": "BRISQUE", "lattice": "Lattice"}


def _extra(metrics: tuple[str, ...], values: dict[str, float]) -> str:
    return "".join(f"  {values[m]:>{max(8, len(HEADERS[m]))}.4f}" for m in metrics)


def _extra_header(metrics: tuple[str, ...]) -> str:
    return "".join(f"  {HEADERS[m]:>{max(8, len(HEADERS[m]))}}" for m in metrics)


def _set_line(name: str, width: int, images: int, p: float, s: float,
              metrics: tuple[str, ...] = (), values: dict[str, float] | None = None) -> str:
    """One line of the summary table: a set (or a blind mean) with its image count and means."""
    return f"  {name:<{width}}  {images:>6}  {p:>8.4f}  {s:>7.4f}" + _extra(metrics, values or {})


def _row(name: str, width: int, p: float, s: float,
         metrics: tuple[str, ...] = (), values: dict[str, float] | None = None) -> str:
    return f"  {name:<{width}}  {p:>8.4f}  {s:>7.4f}" + _extra(metrics, values or {})


def _describe_metrics(metrics: tuple[str, ...]) -> str:
    """The line that says how the perceptual columns were scored (docs/evaluation.md has it in full)."""
    from ..evaluation.perceptual import CVVDP_DISPLAY

    how = {
        "haarpsi": "HaarPSI (1 = identical)",
        "cvvdp": f"CVVDP (JOD, {CVVDP_DISPLAY} display; 10 = no visible difference)",
        "brisque": "BRISQUE (SR alone; lower = more natural)",
        "lattice": "Lattice (grey levels of a pattern locked to the LR grid, on HR's smooth parts; lower "
                   "= less)",
    }
    return f"perceptual, on RGB with the same crop: {', '.join(how[m] for m in metrics)}"


def _score_printed(plan: SetPlan, upscale: UpscaleFn | None, args: argparse.Namespace, bar,
                   metrics: tuple[str, ...] = ()) -> SetResult:
    """:func:`sr.evaluation.score_set` with a table per set (unless --quiet); ``bar`` counts images."""
    from tqdm import tqdm

    from ..evaluation import score_set

    width = max(12, *(len(h.stem) for h, _ in plan.pairs))
    if not args.quiet:
        lr_note = f"LR from {plan.lr_dir}" if plan.lr_dir else "LR = bicubic of HR"
        print(f"\n{plan.name} ({len(plan.pairs)} images, {lr_note})")
        print(f"  {'image':<{width}}  {'PSNR':>8}  {'SSIM':>7}" + _extra_header(metrics))

    def on_image(stem: str, p: float, s: float, **values: float) -> None:
        bar.update(1)
        if not args.quiet:  # above the bar, not through it
            tqdm.write(_row(stem, width, p, s, metrics, values), file=sys.stdout)

    res = score_set(plan, upscale, args.scale, args.channel, args.gray_as_rgb,
                    Path(args.save) if args.save else None, on_image, metrics)
    if not args.quiet:
        print(_row("mean", width, res.psnr, res.ssim, metrics, {m: res.mean(m) for m in metrics}))
    return res


# -- run --------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    scale = args.scale
    if not 2 <= scale <= MAX_BICUBIC_SCALE:
        raise CLIError(f"--scale must be between 2 and {MAX_BICUBIC_SCALE}, got {scale}")
    if args.model != "bicubic" and scale not in (2, 3, 4):
        raise CLIError(f"models exist for x2, x3 and x4 only, got --scale {scale}")
    if args.model == "bicubic" and (args.tta or args.budget is not None):
        raise CLIError("--tta and --budget need a model, not bicubic")
    if args.save and Path(args.save).exists() and not Path(args.save).is_dir():
        raise CLIError(f"--save {args.save} exists and is not a folder")
    if args.degrade is None and (args.degrade_seed is not None or args.degrade_dir is not None):
        raise CLIError("--degrade-seed and --degrade-dir go with --degrade")
    if args.degrade is not None and args.lr is not None:
        raise CLIError("--degrade and --lr exclude each other (--degrade makes the LR sets)")
    json_path, csv_path = _check_output(args.json, "--json"), _check_output(args.csv, "--csv")
    # before any folder is read or the model loaded: a missing package fails in seconds, not after
    # a set has been upscaled
    metrics = parse_metric_choice(args.metrics)
    from ..evaluation import EvaluationError

    try:
        return _evaluate(args, json_path, csv_path, metrics)
    except EvaluationError as e:
        raise CLIError(str(e)) from None


class DegradedRun(NamedTuple):
    """What ``--degrade`` scores: the planned sets, their seed and the folder they are built in."""

    targets: list[DegradedTarget]
    seed: int
    folder: Path


def _evaluate(
    args: argparse.Namespace, json_path: Path | None, csv_path: Path | None, metrics: tuple[str, ...] = ()
) -> int:
    from tqdm import tqdm

    from ..evaluation import blind_means, plan_sets, results_csv, results_json, write_file
    from ..evaluation.perceptual import min_side

    scale = args.scale
    degraded = _plan_degraded(args, metrics)
    plans = [] if degraded is not None else plan_sets(args.hr, args.lr, scale, min_side(metrics))
    device = pick_device(args.device)  # checked even for bicubic, so a typo never passes silently
    upscale, model_desc = _load_upscaler(args, device)
    set_levels: dict[str, str] = {}
    if degraded is not None:
        plans, set_levels = _build_degraded(args, degraded, metrics)
    _print_heading(args, model_desc, metrics, degraded)
    t0 = time.perf_counter()
    # On a terminal only (disable=None): a model on a large set is minutes of otherwise silent work.
    with tqdm(total=sum(len(p.pairs) for p in plans), unit="img", disable=None, file=sys.stderr,
              dynamic_ncols=True, leave=False) as bar:
        results = [_score_printed(plan, upscale, args, bar, metrics) for plan in plans]
    blind = blind_means(results, set_levels, scale) if degraded is not None else None
    _print_summary(results, blind, metrics)
    header = _results_header(args, model_desc, round(time.perf_counter() - t0, 3), metrics, degraded)
    # Written only once everything is scored, each atomically: never a partial results file.
    if json_path:
        write_file(json_path, results_json(results, header, set_levels, blind).encode())
    if csv_path:
        write_file(csv_path, results_csv(results, blind).encode())
    return 0


def _plan_degraded(args: argparse.Namespace, metrics: tuple[str, ...]) -> DegradedRun | None:
    """``--degrade``'s sets, checked (HR folders, targets, and what the metrics need of the images)
    before any is built; None without ``--degrade``."""
    if args.degrade is None:
        return None
    from ..evaluation import parse_levels, plan_degraded, plan_sets
    from ..evaluation.degraded import DEFAULT_SEED
    from ..evaluation.perceptual import min_side

    levels = parse_levels(args.degrade, "--degrade")
    seed = DEFAULT_SEED if args.degrade_seed is None else args.degrade_seed
    folder = Path(args.degrade_dir or DEFAULT_DEGRADE_DIR)
    targets = plan_degraded(args.hr, levels, args.scale, folder, seed)  # checks the HR folders too
    if min_side(metrics):  # and what the metrics need of them, before any set is built
        plan_sets(args.hr, None, args.scale, min_side(metrics))
    return DegradedRun(targets, seed, folder)


def _load_upscaler(args: argparse.Namespace, device: torch.device) -> tuple[UpscaleFn | None, str]:
    """(upscale function, description) of ``--model``; bicubic is the protocol's own (None)."""
    if args.model == "bicubic":
        return None, "bicubic (MATLAB imresize)"
    from ..evaluation import load_model

    return load_model(args.model, args.scale, device, args.tta, args.budget, args.precision,
                      weights_dir=checked_weights_dir(args.weights_dir))


def _build_degraded(
    args: argparse.Namespace, degraded: DegradedRun, metrics: tuple[str, ...]
) -> tuple[list[SetPlan], dict[str, str]]:
    """Build (or reuse) the degraded sets, the only writes before scoring; their plans, named
    <set>-<level>-x<S>, and each set's level by that name."""
    from ..evaluation import build_targets, describe_built, plan_sets
    from ..evaluation.perceptual import min_side

    def built(target: DegradedTarget, manifest: dict) -> None:
        if not args.quiet:
            print(describe_built(target, manifest), flush=True)

    targets, scale = degraded.targets, args.scale
    build_targets(targets, scale, degraded.seed, built)
    plans = plan_sets([str(t.hr_dir) for t in targets], [str(t.out) for t in targets], scale,
                      min_side(metrics))
    set_levels = {}
    for plan, t in zip(plans, targets, strict=True):
        plan.name = t.out.name  # <set>-<level>-x<S>, the name training logs give a --val-lr set
        set_levels[plan.name] = t.level
    return plans, set_levels


def _print_heading(args: argparse.Namespace, model_desc: str, metrics: tuple[str, ...],
                   degraded: DegradedRun | None) -> None:
    chan, scale = ("Y" if args.channel == "y" else "RGB"), args.scale
    print(f"model: {model_desc}   scale: x{scale}   scored on: {chan}, {scale}-pixel border cropped")
    if metrics:
        print(_describe_metrics(metrics))
    if degraded is not None:
        print(f"degraded LR: {', '.join(dict.fromkeys(t.level for t in degraded.targets))} "
              f"(seed {degraded.seed}, sets in {degraded.folder})")


def _print_summary(results: list[SetResult], blind: list[BlindMean] | None, metrics: tuple[str, ...]) -> None:
    """The table of every set's means, each folder's blind mean after its last set."""
    from ..evaluation import BLIND_LEVELS

    width = max(12, *(len(r.plan.name) for r in results), *(len(b.name) for b in blind or []))
    print(f"\n  {'set':<{width}}  {'images':>6}  {'PSNR':>8}  {'SSIM':>7}" + _extra_header(metrics))
    last = {r.plan.hr_dir: r for r in results}  # a folder's blind mean follows its last set
    for r in results:
        print(_set_line(r.plan.name, width, len(r.rows), r.psnr, r.ssim, metrics,
                        {m: r.mean(m) for m in metrics}))
        for b in blind or []:
            if last[b.hr_dir] is r:
                print(_set_line(b.name, width, b.images, b.psnr, b.ssim, metrics, b.perceptual))
    if blind:
        print(f"\n  blind mean = the mean of a folder's {', '.join(BLIND_LEVELS)} sets scored here")


def _results_header(args: argparse.Namespace, model_desc: str, seconds: float, metrics: tuple[str, ...],
                    degraded: DegradedRun | None) -> dict:
    """The run's description at the top of --json (what was scored, how, and how long it took)."""
    header = {
        "model": args.model,
        "description": model_desc,
        "scale": args.scale,
        "channel": args.channel,
        "gray_as_rgb": args.gray_as_rgb,
        "crop_border": args.scale,
        "seconds": seconds,
    }
    if metrics:
        from ..evaluation.perceptual import BASE_METRICS, CVVDP_DISPLAY

        header["metrics"] = [*BASE_METRICS, *metrics]
        if "cvvdp" in metrics:
            header["cvvdp_display"] = CVVDP_DISPLAY
    if degraded is not None:
        header["degrade"] = {"levels": list(dict.fromkeys(t.level for t in degraded.targets)),
                             "seed": degraded.seed, "dir": str(degraded.folder)}
    return header
