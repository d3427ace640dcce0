"""``sr eval``: PSNR/SSIM of bicubic or a model on folders of HR images (the protocol in
:mod:`sr.evaluation`), printed as a table and optionally written as JSON/CSV, with the SR images.

Everything that can be checked before scoring (folders, LR/HR pairing and sizes, weights, scale,
output paths) is checked first, so a bad invocation fails fast and writes nothing.

``--degrade LEVEL[,LEVEL...]|all`` scores degraded sets instead of the bicubic LR: for each HR folder
and level the seeded set of :mod:`sr.evaluation.degraded` is built in (or reused from) ``--degrade-dir``
(default ``runs/degraded``, the layout of ``sr degrade -o``) and scored as ``--lr`` folders against
the clean HR, with a "blind mean" row (mild/medium/heavy) per HR folder.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CLIError
from .precision import add_precision_argument

if TYPE_CHECKING:
    import torch
    from tqdm import tqdm

    from ..descriptor import ModelDescriptor
    from ..evaluation import SetPlan, SetResult, UpscaleFn

MAX_BICUBIC_SCALE = 8
DEFAULT_DEGRADE_DIR = "runs/degraded"
# the levels whose mean is the "blind" row: unknown blur, noise and JPEG (web is resize + JPEG only)
BLIND_LEVELS = ("mild", "medium", "heavy")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hr", nargs="+", required=True, metavar="DIR", help="folders of HR images, one set each")
    p.add_argument(
        "--lr", nargs="+", metavar="DIR",
        help="LR folders, one per --hr, matched by file stem (default: MATLAB-bicubic LR made from HR)",
    )
    p.add_argument(
        "--degrade", metavar="LEVEL",
        help="score seeded degraded LR sets instead: web, mild, medium, heavy, a comma list or all "
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
    p.add_argument("--channel", choices=("y", "rgb"), default="y", help="score Y (default) or RGB")
    p.add_argument(
        "--gray-as-rgb", action="store_true",
        help="score gray HR images as RGB (replicated, then Y) instead of on their gray values",
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


def plan_sets(hr_dirs: list[str], lr_dirs: list[str] | None, scale: int) -> list[SetPlan]:
    """The sets of :func:`sr.evaluation.plan_sets`, a bad one as a CLI message."""
    from ..evaluation import EvaluationError
    from ..evaluation import plan_sets as plan

    try:
        return plan(hr_dirs, lr_dirs, scale)
    except EvaluationError as e:
        raise CLIError(str(e)) from None


def _check_output(path: str | None, flag: str) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise CLIError(f"{flag} {p} is a folder; give a file name")
    if p.parent.exists() and not p.parent.is_dir():
        raise CLIError(f"{flag} {p}: {p.parent} is not a folder")
    return p


# -- model ------------------------------------------------------------------------------------------


def pick_device(name: str) -> torch.device:
    """The engine's device resolution (auto = CUDA, MPS, CPU), its errors as CLI messages."""
    from ..inference.devices import DeviceError, resolve_device

    try:
        return resolve_device(name)
    except DeviceError as e:
        raise CLIError(str(e)) from None


def load_model(
    name: str, scale: int, device: torch.device, tta: bool = False, budget: float | None = None,
    precision: str = "fp32",
) -> tuple[UpscaleFn, str]:
    """(upscale function, description) for --model; weights are checked against --scale.

    ``budget`` overrides the adaptive attention's mean number of key regions per query region.
    ``precision``: the network's dtype, as the engine resolves it for this model (auto included).
    """
    import torch

    from ..evaluation import model_upscaler
    from ..inference.precision import PrecisionError, precision_name, record_name, resolve_dtype
    from ..weights import WeightsError, find_models, loaded

    try:
        family, found = find_models(name)  # a file, a model name, or a family (asa-deep: each scale)
        if scale not in found:
            (only,) = found.values() if len(found) == 1 else (None,)
            if only is not None and (only.path.stem == family or name.endswith(".safetensors")):
                raise CLIError(f"{only.path} is a x{only.scale} model but --scale is {scale}")
            have = ", ".join(f"x{s}" for s in sorted(found))
            raise CLIError(f"{family} has no x{scale} model (it has {have})")
        model = loaded(found[scale])
    except WeightsError as e:
        raise CLIError(f"{e} (or use --model bicubic)") from None
    if budget is not None:
        set_budget(model, budget)
    try:
        dtype = resolve_dtype(precision, device, [record_name(model)])
    except PrecisionError as e:
        raise CLIError(str(e)) from None
    net = model.net.to(device=device, dtype=dtype)
    # the model's own name (asa-base-x2), not its training run's in the metadata (x2-extra)
    label = model.name
    extras = ", x8 self-ensemble" if tta else ""
    extras += f", {precision_name(dtype)}" if dtype != torch.float32 else ""
    extras += f", attention budget {budget:g}" if budget is not None else ""
    desc = f"{label} ({model.path}, {model.params:,} params, {device}{extras})"
    return model_upscaler(net, device, tta, dtype), desc


def set_budget(model: ModelDescriptor, budget: float) -> None:
    """Set every adaptive attention block's target budget (0 = attention skipped everywhere), within
    the budget cap the model's descriptor states."""
    from ..models.attention import AdaptiveSparseAttention

    blocks = [m for m in model.net.modules() if isinstance(m, AdaptiveSparseAttention)]
    if not blocks or model.k_max is None:
        raise CLIError("--budget needs a model with adaptive attention")
    if not 0 <= budget <= model.k_max:
        raise CLIError(f"--budget must be between 0 and the model's k_max {model.k_max:g}, got {budget:g}")
    for block in blocks:
        block.set_budget(budget)


# -- output -----------------------------------------------------------------------------------------


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    from ..io import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)


def save_png(img: np.ndarray, path: Path) -> None:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    _atomic_write_bytes(path, buf.getvalue())


def _num(x: float) -> float | None:
    # JSON has no infinity: an exact reconstruction's PSNR is written as null.
    return x if math.isfinite(x) else None


@dataclass
class BlindMean:
    """The mean of one HR folder's mild/medium/heavy sets (each set's mean, then their mean)."""

    name: str
    hr_dir: Path
    levels: list[str]
    psnr: float
    ssim: float
    images: int


def results_json(
    results: list[SetResult], header: dict, levels: dict[str, str] | None = None,
    blind: list[BlindMean] | None = None,
) -> str:
    """``levels``: set name -> degradation level of the --degrade sets; ``blind``: their blind means."""
    sets = []
    for r in results:
        entry = {
            "name": r.plan.name,
            "hr": str(r.plan.hr_dir),
            "lr": str(r.plan.lr_dir) if r.plan.lr_dir else None,
        }
        if levels:
            entry["level"] = levels.get(r.plan.name)
        sets.append({
            **entry,
            "images": len(r.rows),
            "psnr": _num(r.psnr),
            "ssim": r.ssim,
            "seconds": round(r.seconds, 3),
            "per_image": [{"image": n, "psnr": _num(p), "ssim": s} for n, p, s in r.rows],
        })
    doc = {**header, "sets": sets}
    if blind is not None:
        doc["blind_means"] = [
            {"name": b.name, "hr": str(b.hr_dir), "levels": b.levels, "images": b.images,
             "psnr": _num(b.psnr), "ssim": b.ssim}
            for b in blind
        ]
    return json.dumps(doc, indent=2) + "\n"


def results_csv(results: list[SetResult], blind: list[BlindMean] | None = None) -> str:
    """Rows of kind ``image`` and ``mean`` per set, then one ``blind-mean`` row per blind mean."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["set", "kind", "image", "psnr", "ssim"])
    for r in results:
        for n, p, s in r.rows:
            w.writerow([r.plan.name, "image", n, f"{p:.4f}", f"{s:.4f}"])
        w.writerow([r.plan.name, "mean", "", f"{r.psnr:.4f}", f"{r.ssim:.4f}"])
    for b in blind or []:
        w.writerow([b.name, "blind-mean", "", f"{b.psnr:.4f}", f"{b.ssim:.4f}"])
    return buf.getvalue()


def blind_means(results: list[SetResult], levels: dict[str, str], scale: int) -> list[BlindMean]:
    """Per HR folder, the mean of its mild/medium/heavy sets' means when more than one was scored."""
    from ..evaluation import set_name

    by_hr: dict[Path, list[SetResult]] = {}
    for r in results:
        if levels.get(r.plan.name) in BLIND_LEVELS:
            by_hr.setdefault(r.plan.hr_dir, []).append(r)
    out = []
    for hr_dir, rs in by_hr.items():
        if len(rs) < 2:
            continue
        out.append(BlindMean(
            f"{set_name(hr_dir)}-blind-mean-x{scale}", hr_dir, [levels[r.plan.name] for r in rs],
            float(np.mean([r.psnr for r in rs])), float(np.mean([r.ssim for r in rs])), len(rs[0].rows),
        ))
    return out


def _set_line(name: str, width: int, images: int, p: float, s: float) -> str:
    """One line of the summary table: a set (or a blind mean) with its image count and means."""
    return f"  {name:<{width}}  {images:>6}  {p:>8.4f}  {s:>7.4f}"


def _row(name: str, width: int, p: float, s: float) -> str:
    return f"  {name:<{width}}  {p:>8.4f}  {s:>7.4f}"


# -- run --------------------------------------------------------------------------------------------


def score_set(
    plan: SetPlan, upscale: UpscaleFn | None, args: argparse.Namespace, bar: tqdm | None = None
) -> SetResult:
    """Score (and print, and save) one set's images in order; ``bar`` counts them."""
    from tqdm import tqdm

    from ..evaluation import SetResult, make_lr, score_pairs
    from ..resize import imresize, modcrop

    scale, res = args.scale, SetResult(plan)
    width = max(12, *(len(h.stem) for h, _ in plan.pairs))
    if not args.quiet:
        lr_note = f"LR from {plan.lr_dir}" if plan.lr_dir else "LR = bicubic of HR"
        print(f"\n{plan.name} ({len(plan.pairs)} images, {lr_note})")
        print(f"  {'image':<{width}}  {'PSNR':>8}  {'SSIM':>7}")
    t0 = time.perf_counter()
    scored = score_pairs(plan, upscale, scale, args.channel, args.gray_as_rgb)
    for hr_path, _ in plan.pairs:
        try:
            _, hr, p, s, sr = next(scored)
        except (OSError, ValueError) as e:
            raise CLIError(f"{hr_path}: {e}") from None
        except RuntimeError as e:  # out of device memory, mostly
            raise CLIError(f"{hr_path}: inference failed ({e}); try --device cpu") from None
        res.rows.append((hr_path.stem, p, s))
        if bar is not None:
            bar.update(1)
        if not args.quiet:
            tqdm.write(_row(hr_path.stem, width, p, s), file=sys.stdout)  # above the bar, not through it
        if args.save:
            if sr.ndim == 2 and (hr.ndim == 3 or args.gray_as_rgb):
                # The classic baseline is scored on Y alone; save the viewable RGB bicubic instead.
                hr_rgb = modcrop(hr if hr.ndim == 3 else np.repeat(hr[:, :, None], 3, axis=2), scale)
                sr = imresize(make_lr(hr_rgb, scale), scale)
            save_png(sr, Path(args.save) / plan.name / f"{hr_path.stem}.png")
    res.seconds = time.perf_counter() - t0
    if not args.quiet:
        print(_row("mean", width, res.psnr, res.ssim))
    return res


def run(args: argparse.Namespace) -> int:
    scale = args.scale
    bicubic = args.model == "bicubic"
    if not 2 <= scale <= MAX_BICUBIC_SCALE:
        raise CLIError(f"--scale must be between 2 and {MAX_BICUBIC_SCALE}, got {scale}")
    if not bicubic and scale not in (2, 3, 4):
        raise CLIError(f"models exist for x2, x3 and x4 only, got --scale {scale}")
    json_path, csv_path = _check_output(args.json, "--json"), _check_output(args.csv, "--csv")
    if args.save and Path(args.save).exists() and not Path(args.save).is_dir():
        raise CLIError(f"--save {args.save} exists and is not a folder")
    degrade = getattr(args, "degrade", None)
    seed, degrade_dir = getattr(args, "degrade_seed", None), getattr(args, "degrade_dir", None)
    if degrade is None and (seed is not None or degrade_dir is not None):
        raise CLIError("--degrade-seed and --degrade-dir go with --degrade")
    targets = None
    if degrade is not None:
        from ..evaluation.degraded import DEFAULT_SEED
        from .degrade import parse_levels, plan_degraded

        if args.lr is not None:
            raise CLIError("--degrade and --lr exclude each other (--degrade makes the LR sets)")
        levels = parse_levels(degrade, "--degrade")
        seed = DEFAULT_SEED if seed is None else seed
        degrade_dir = Path(degrade_dir or DEFAULT_DEGRADE_DIR)
        targets = plan_degraded(args.hr, levels, scale, degrade_dir, seed)  # checks the HR folders too
        plans = []
    else:
        plans = plan_sets(args.hr, args.lr, scale)
    device = pick_device(args.device)  # checked even for bicubic, so a typo never passes silently
    if bicubic:
        if args.tta or args.budget is not None:
            raise CLIError("--tta and --budget need a model, not bicubic")
        upscale, model_desc = None, "bicubic (MATLAB imresize)"
    else:
        upscale, model_desc = load_model(args.model, scale, device, args.tta, args.budget,
                                         getattr(args, "precision", "fp32"))

    set_levels: dict[str, str] = {}
    if targets is not None:
        from .degrade import build_targets

        build_targets(targets, scale, seed, quiet=args.quiet)  # the only writes before scoring
        plans = plan_sets([str(t.hr_dir) for t in targets], [str(t.out) for t in targets], scale)
        for plan, t in zip(plans, targets, strict=True):
            plan.name = t.out.name  # <set>-<level>-x<S>, the name training logs give a --val-lr set
            set_levels[plan.name] = t.level

    chan = "Y" if args.channel == "y" else "RGB"
    print(f"model: {model_desc}   scale: x{scale}   scored on: {chan}, {scale}-pixel border cropped")
    if targets is not None:
        print(f"degraded LR: {', '.join(dict.fromkeys(t.level for t in targets))} "
              f"(seed {seed}, sets in {degrade_dir})")
    t0 = time.perf_counter()
    from tqdm import tqdm

    # On a terminal only (disable=None): a model on a large set is minutes of otherwise silent work.
    with tqdm(total=sum(len(p.pairs) for p in plans), unit="img", disable=None, file=sys.stderr,
              dynamic_ncols=True, leave=False) as bar:
        results = [score_set(plan, upscale, args, bar) for plan in plans]
    blind = blind_means(results, set_levels, scale) if targets is not None else None
    width = max(12, *(len(r.plan.name) for r in results), *(len(b.name) for b in blind or []))
    print(f"\n  {'set':<{width}}  {'images':>6}  {'PSNR':>8}  {'SSIM':>7}")
    last = {r.plan.hr_dir: r for r in results}  # a folder's blind mean follows its last set
    for r in results:
        print(_set_line(r.plan.name, width, len(r.rows), r.psnr, r.ssim))
        for b in blind or []:
            if last[b.hr_dir] is r:
                print(_set_line(b.name, width, b.images, b.psnr, b.ssim))
    if blind:
        print(f"\n  blind mean = the mean of a folder's {', '.join(BLIND_LEVELS)} sets scored here")

    header = {
        "model": args.model,
        "description": model_desc,
        "scale": scale,
        "channel": args.channel,
        "gray_as_rgb": args.gray_as_rgb,
        "crop_border": scale,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    if targets is not None:
        header["degrade"] = {"levels": list(dict.fromkeys(t.level for t in targets)), "seed": seed,
                             "dir": str(degrade_dir)}
    # Written only once everything is scored, each atomically: never a partial results file.
    if json_path:
        _atomic_write_bytes(json_path, results_json(results, header, set_levels, blind).encode())
    if csv_path:
        _atomic_write_bytes(csv_path, results_csv(results, blind).encode())
    return 0
