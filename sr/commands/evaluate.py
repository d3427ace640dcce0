"""``sr eval``: PSNR/SSIM of bicubic or a model on folders of HR images (the protocol in
:mod:`sr.evaluation`), printed as a table and optionally written as JSON/CSV, with the SR images.

Everything that can be checked before scoring (folders, LR/HR pairing and sizes, weights, scale,
output paths) is checked first, so a bad invocation fails fast and writes nothing.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..cli import CLIError

if TYPE_CHECKING:
    import torch

    from ..evaluation import UpscaleFn

MAX_BICUBIC_SCALE = 8
# LR file stems carry a scale marker: baby_x2, 0801x2, baby_LRBI_x2, img_001_SRF_2_LR, baby_LR.
_LR_SUFFIX = re.compile(
    r"(?:[_\-.]?(?:lrbi|lrbd|lrdn|lr|bicubic|bic)?[_\-.]?x\d+|[_\-]srf[_\-]\d+(?:[_\-](?:lr|hr))?|[_\-](?:lr|hr))$",
    re.IGNORECASE,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hr", nargs="+", required=True, metavar="DIR", help="folders of HR images, one set each")
    p.add_argument(
        "--lr", nargs="+", metavar="DIR",
        help="LR folders, one per --hr, matched by file stem (default: MATLAB-bicubic LR made from HR)",
    )
    p.add_argument("--scale", type=int, required=True, help="upscaling factor (models: 2, 3 or 4)")
    p.add_argument(
        "--model", default="bicubic",
        help="'bicubic' (default), a shipped model name (asa-base-x2) or a .safetensors weights file",
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
    p.add_argument("--budget", type=float, metavar="K",
                   help="adaptive attention: mean key regions per query region at inference (0 = skip "
                        "attention; default: as trained)")
    p.add_argument("--tta", action="store_true",
                   help="score the x8 geometric self-ensemble of the model (the '+' rows of SR papers)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the per-set means")


@dataclass
class SetPlan:
    name: str
    hr_dir: Path
    lr_dir: Path | None
    pairs: list[tuple[Path, Path | None]]  # (HR file, matched LR file or None: LR made from HR)


@dataclass
class SetResult:
    plan: SetPlan
    rows: list[tuple[str, float, float]] = field(default_factory=list)  # (image, psnr, ssim)
    seconds: float = 0.0

    @property
    def psnr(self) -> float:
        return float(np.mean([r[1] for r in self.rows]))

    @property
    def ssim(self) -> float:
        return float(np.mean([r[2] for r in self.rows]))


# -- planning ---------------------------------------------------------------------------------------


def set_names(dirs: list[Path]) -> list[str]:
    """One unique, descriptive name per HR folder (used in tables and as --save sub-folders)."""
    from ..evaluation import set_name

    names: list[str] = []
    for d in dirs:
        name = base = set_name(d)
        i = 2
        while name in names:
            name, i = f"{base}-{i}", i + 1
        names.append(name)
    return names


def lr_key(stem: str) -> str:
    """A file stem without its LR/HR scale marker, lower-cased: 'baby_LRBI_x2' -> 'baby'."""
    return _LR_SUFFIX.sub("", stem).lower()


def match_lr(hr_files: list[Path], lr_files: list[Path]) -> list[Path]:
    """For each HR file the LR file with the same stem: exact, then the LR stem without its scale
    suffix, then both without (so 'box2.png' pairs with 'box2x2.png', not with 'bo...')."""
    tiers = [
        lambda h, lr: lr.stem == h.stem,
        lambda h, lr: lr_key(lr.stem) == h.stem.lower(),
        lambda h, lr: lr_key(lr.stem) == lr_key(h.stem),
    ]
    out = []
    for h in hr_files:
        for same in tiers:
            found = [lr for lr in lr_files if same(h, lr)]
            if len(found) > 1:
                names = ", ".join(f.name for f in found)
                raise CLIError(f"{h.name}: several LR images match ({names})")
            if found:
                out.append(found[0])
                break
        else:
            raise CLIError(f"{h.name}: no LR image with a matching name in {lr_files[0].parent}")
    return out


def _image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the header, with an unreadable file as a CLIError."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            return im.size
    except (UnidentifiedImageError, OSError) as e:
        raise CLIError(f"{path}: not a readable image ({e})") from None


def _listing(folder: Path, what: str) -> list[Path]:
    from ..evaluation import list_images

    if not folder.exists():
        raise CLIError(f"{what} folder not found: {folder}")
    if not folder.is_dir():
        raise CLIError(f"{what} path is not a folder: {folder}")
    files = list_images(folder)
    if not files:
        raise CLIError(f"no images in {what} folder {folder}")
    return files


def plan_sets(hr_dirs: list[str], lr_dirs: list[str] | None, scale: int) -> list[SetPlan]:
    """Folders -> image pairs. Every header is read up front: unreadable or too-small HR images, and
    LR images that are not exactly HR / scale (after modcrop), fail before anything is scored."""
    if lr_dirs is not None and len(lr_dirs) != len(hr_dirs):
        raise CLIError(f"give one --lr folder per --hr folder ({len(hr_dirs)} HR, {len(lr_dirs)} LR)")
    hr_paths = [Path(d) for d in hr_dirs]
    plans = []
    for i, (name, hr_dir) in enumerate(zip(set_names(hr_paths), hr_paths, strict=True)):
        hr_files = _listing(hr_dir, "HR")
        lr_dir = Path(lr_dirs[i]) if lr_dirs is not None else None
        lr_files = match_lr(hr_files, _listing(lr_dir, "LR")) if lr_dir else [None] * len(hr_files)
        for h, lr in zip(hr_files, lr_files, strict=True):
            hw, hh = _image_size(h)
            mw, mh = hw - hw % scale, hh - hh % scale
            # SSIM's 11x11 window needs 11 pixels left after the scale-wide border crop.
            if min(mw, mh) - 2 * scale < 11:
                raise CLIError(f"{h}: {hw}x{hh} is too small to score at x{scale}")
            if lr is not None:
                lw, lh = _image_size(lr)
                if (mw, mh) != (lw * scale, lh * scale):
                    raise CLIError(
                        f"{h.name}: HR {hw}x{hh} (modcropped to {mw}x{mh}) "
                        f"is not {scale} x LR {lw}x{lh} ({lr})"
                    )
        plans.append(SetPlan(name, hr_dir, lr_dir, list(zip(hr_files, lr_files, strict=True))))
    return plans


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
    name: str, scale: int, device: torch.device, tta: bool = False, budget: float | None = None
) -> tuple[UpscaleFn, str]:
    """(upscale function, description) for --model; weights are checked against --scale.

    ``budget`` overrides the adaptive attention's mean number of key regions per query region.
    """
    from ..evaluation import model_upscaler
    from ..models import count_params
    from ..weights import WeightsError, load_weights, resolve_weights

    try:
        path = resolve_weights(name)
        model, meta = load_weights(path)
    except WeightsError as e:
        raise CLIError(f"{e} (or use --model bicubic)") from None
    if model.scale != scale:
        raise CLIError(f"{path} is a x{model.scale} model but --scale is {scale}")
    if budget is not None:
        set_budget(model, budget)
    model.to(device)
    label = meta.get("name") or path.stem
    extras = ", x8 self-ensemble" if tta else ""
    extras += f", attention budget {budget:g}" if budget is not None else ""
    desc = f"{label} ({path}, {count_params(model):,} params, {device}{extras})"
    return model_upscaler(model, device, tta), desc


def set_budget(model: torch.nn.Module, budget: float) -> None:
    """Set every adaptive attention block's target budget (0 = attention skipped everywhere)."""
    from ..models.attention import AdaptiveSparseAttention

    blocks = [m for m in model.modules() if isinstance(m, AdaptiveSparseAttention)]
    if not blocks:
        raise CLIError("--budget needs a model with adaptive attention")
    for block in blocks:
        if not 0 <= budget <= block.k_max:
            raise CLIError(f"--budget must be between 0 and the model's k_max {block.k_max}, got {budget:g}")
        block.budget, block.k_min = float(budget), min(block.k_min, int(budget))


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


def results_json(results: list[SetResult], header: dict) -> str:
    sets = []
    for r in results:
        sets.append({
            "name": r.plan.name,
            "hr": str(r.plan.hr_dir),
            "lr": str(r.plan.lr_dir) if r.plan.lr_dir else None,
            "images": len(r.rows),
            "psnr": _num(r.psnr),
            "ssim": r.ssim,
            "seconds": round(r.seconds, 3),
            "per_image": [{"image": n, "psnr": _num(p), "ssim": s} for n, p, s in r.rows],
        })
    return json.dumps({**header, "sets": sets}, indent=2) + "\n"


def results_csv(results: list[SetResult]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["set", "kind", "image", "psnr", "ssim"])
    for r in results:
        for n, p, s in r.rows:
            w.writerow([r.plan.name, "image", n, f"{p:.4f}", f"{s:.4f}"])
        w.writerow([r.plan.name, "mean", "", f"{r.psnr:.4f}", f"{r.ssim:.4f}"])
    return buf.getvalue()


def _row(name: str, width: int, p: float, s: float) -> str:
    return f"  {name:<{width}}  {p:>8.4f}  {s:>7.4f}"


# -- run --------------------------------------------------------------------------------------------


def score_set(plan: SetPlan, upscale: UpscaleFn | None, args: argparse.Namespace) -> SetResult:
    """Score (and print, and save) one set's images in order."""
    from ..evaluation import load_hr, make_lr, score_image, score_lr
    from ..resize import imresize, modcrop

    scale, res = args.scale, SetResult(plan)
    width = max(12, *(len(h.stem) for h, _ in plan.pairs))
    if not args.quiet:
        lr_note = f"LR from {plan.lr_dir}" if plan.lr_dir else "LR = bicubic of HR"
        print(f"\n{plan.name} ({len(plan.pairs)} images, {lr_note})")
        print(f"  {'image':<{width}}  {'PSNR':>8}  {'SSIM':>7}")
    t0 = time.perf_counter()
    for hr_path, lr_path in plan.pairs:
        try:
            hr = load_hr(hr_path)
            if lr_path is None:
                p, s, sr = score_image(hr, upscale, scale, args.channel, args.gray_as_rgb)
            else:
                p, s, sr = score_lr(hr, load_hr(lr_path), upscale, scale, args.channel, args.gray_as_rgb)
        except (OSError, ValueError) as e:
            raise CLIError(f"{hr_path}: {e}") from None
        except RuntimeError as e:  # out of device memory, mostly
            raise CLIError(f"{hr_path}: inference failed ({e}); try --device cpu") from None
        res.rows.append((hr_path.stem, p, s))
        if not args.quiet:
            print(_row(hr_path.stem, width, p, s), flush=True)
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
    plans = plan_sets(args.hr, args.lr, scale)
    device = pick_device(args.device)  # checked even for bicubic, so a typo never passes silently
    if bicubic:
        if args.tta or args.budget is not None:
            raise CLIError("--tta and --budget need a model, not bicubic")
        upscale, model_desc = None, "bicubic (MATLAB imresize)"
    else:
        upscale, model_desc = load_model(args.model, scale, device, args.tta, args.budget)

    chan = "Y" if args.channel == "y" else "RGB"
    print(f"model: {model_desc}   scale: x{scale}   scored on: {chan}, {scale}-pixel border cropped")
    t0 = time.perf_counter()
    results = [score_set(plan, upscale, args) for plan in plans]
    width = max(12, *(len(r.plan.name) for r in results))
    print(f"\n  {'set':<{width}}  {'images':>6}  {'PSNR':>8}  {'SSIM':>7}")
    for r in results:
        print(f"  {r.plan.name:<{width}}  {len(r.rows):>6}  {r.psnr:>8.4f}  {r.ssim:>7.4f}")

    header = {
        "model": args.model,
        "description": model_desc,
        "scale": scale,
        "channel": args.channel,
        "gray_as_rgb": args.gray_as_rgb,
        "crop_border": scale,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    # Written only once everything is scored, each atomically: never a partial results file.
    if json_path:
        _atomic_write_bytes(json_path, results_json(results, header).encode())
    if csv_path:
        _atomic_write_bytes(csv_path, results_csv(results).encode())
    return 0
