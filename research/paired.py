"""``python -m research.paired``: two models on the same degraded images, paired, and where they differ.

The question it answers: does the sparse attention pay on degraded input at equal
compute? ``--a`` is the conv-only arm, ``--b`` the attention arm (any two models of one scale work).

- **Per level** (web, mild, medium, heavy, clean; the seeded sets of ``sr degrade``, clean = the
  protocol's MATLAB-bicubic LR) and per HR set: both models' mean Y-PSNR / SSIM (the ``sr eval``
  protocol, fp32 by default, whole images), and the per-image paired difference B - A with its mean,
  standard error (sd / sqrt(n)) and B's wins. ``blind`` is each image's mean over mild, medium and
  heavy, paired the same way.
- **Where the difference lives** (when B has adaptive attention): per block of ``--block`` x
  ``--block`` LR pixels, B's budget (key regions attended, the mean over its attention blocks), the
  error gain ``mse(A) - mse(B)`` on Y (HR pixels of the block; > 0 where B is better), and the
  block's repetition: the largest cosine similarity of its zero-mean LR luminance to any other block
  at least two blocks away (1 = an exact repeat elsewhere in the image: the self-similarity prior).
  Pooled over a level's images: the Spearman correlation of gain with budget, with repetition and
  with detail (the LR luminance's gradient energy, the control: errors of both arms grow with
  detail, so a budget correlation only means something beside it), and the share of the total gain
  that the 20% highest-budget / most-repeated / most-detailed blocks hold (20% when the gain does
  not follow them).
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from benchmarks.tooling import set_threads, write_json
from sr.errors import CLIError

from ._script import run_script

LEVELS = ("web", "mild", "medium", "heavy", "clean")
BLIND = ("mild", "medium", "heavy")
TOP_SHARE = 0.2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--a", required=True, metavar="MODEL",
                   help="the reference arm (conv-only): a name or .safetensors")
    p.add_argument("--b", required=True, metavar="MODEL",
                   help="the compared arm (attention): a name or .safetensors")
    p.add_argument("--hr", nargs="+", required=True, metavar="DIR", help="HR folders, one set each")
    p.add_argument("--scale", type=int, required=True, choices=(2, 3, 4))
    p.add_argument("--levels", default=",".join(LEVELS), help=f"comma list of {', '.join(LEVELS)}")
    p.add_argument("--degrade-dir", default="runs/degraded",
                   help="where the degraded sets are built and reused")
    p.add_argument("--block", type=int, default=8, help="LR block side for the location analysis (default 8)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--max-images", type=int, default=0, help="first N images of each set (0: all)")
    p.add_argument("--json", metavar="FILE", help="write every per-image score and the tables as JSON")


# -- statistics --------------------------------------------------------------------------------
@dataclass
class Paired:
    """Per-image scores of the two arms on one set and level."""

    names: list[str] = field(default_factory=list)
    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    ssim_a: list[float] = field(default_factory=list)
    ssim_b: list[float] = field(default_factory=list)

    def add(self, name: str, psnr_a: float, psnr_b: float, ssim_a: float, ssim_b: float) -> None:
        self.names.append(name)
        self.a.append(psnr_a)
        self.b.append(psnr_b)
        self.ssim_a.append(ssim_a)
        self.ssim_b.append(ssim_b)

    def summary(self) -> dict:
        return {"n": len(self.a), "psnr_a": statistics.fmean(self.a), "psnr_b": statistics.fmean(self.b),
                "ssim_a": statistics.fmean(self.ssim_a), "ssim_b": statistics.fmean(self.ssim_b),
                **paired_stats(self.a, self.b)}


def paired_stats(a: list[float], b: list[float]) -> dict:
    """Mean of the per-image differences b - a, its standard error and b's wins (ties count half)."""
    if len(a) != len(b) or not a:
        raise ValueError("paired statistics need two equally long, non-empty lists")
    d = [y - x for x, y in zip(a, b, strict=True)]
    se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
    wins = sum(1.0 if v > 0 else 0.5 if v == 0 else 0.0 for v in d)
    return {"diff": statistics.fmean(d), "se": se, "wins": wins}


def rank(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), as Spearman's correlation wants them."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), np.float64)
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    rx, ry = rank(np.asarray(x, np.float64)), rank(np.asarray(y, np.float64))
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def top_share(key: np.ndarray, gain: np.ndarray, share: float = TOP_SHARE) -> float:
    """The share of the total gain held by the ``share`` of blocks with the largest ``key``."""
    total = float(gain.sum())
    if total == 0:
        return float("nan")
    top = np.argsort(-key, kind="mergesort")[: max(1, round(share * len(key)))]
    return float(gain[top].sum()) / total


# -- per-block maps --------------------------------------------------------------------------------
def block_means(a: np.ndarray, block: int) -> np.ndarray:
    """(H, W) -> (H // block, W // block) means of whole blocks (the ragged edge is dropped)."""
    h, w = a.shape[0] // block * block, a.shape[1] // block * block
    return a[:h, :w].reshape(h // block, block, w // block, block).mean(axis=(1, 3))


def repetition(y: np.ndarray, block: int, max_blocks: int = 4096) -> np.ndarray:
    """Per LR block: the largest cosine similarity of its zero-mean values to any block at least two
    blocks away (Chebyshev), in [-1, 1]; a flat block (no variance) gets 0. Images with more blocks
    than ``max_blocks`` compare against an evenly strided subset of candidates."""
    gh, gw = y.shape[0] // block, y.shape[1] // block
    v = y[: gh * block, : gw * block].reshape(gh, block, gw, block).transpose(0, 2, 1, 3).reshape(gh * gw, -1)
    v = v - v.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(v, axis=1)
    unit = np.divide(v, norm[:, None], out=np.zeros_like(v), where=norm[:, None] > 1e-6)
    rows, cols = np.divmod(np.arange(gh * gw), gw)
    cand = np.arange(gh * gw)[:: max(1, math.ceil(gh * gw / max_blocks))]
    best = np.zeros(gh * gw)
    for start in range(0, gh * gw, 512):  # bounded memory: 512 x candidates similarities at a time
        idx = np.arange(start, min(start + 512, gh * gw))
        sim = unit[idx] @ unit[cand].T
        dr, dc = np.abs(rows[idx, None] - rows[cand][None]), np.abs(cols[idx, None] - cols[cand][None])
        near = np.maximum(dr, dc) < 2
        sim[near] = -1.0
        best[idx] = sim.max(axis=1) if len(cand) else 0.0
    best[norm <= 1e-6] = 0.0
    return best.reshape(gh, gw)


def gradient_energy(y: np.ndarray) -> np.ndarray:
    """Per pixel: the mean of the squared horizontal and vertical finite differences (edge-padded)."""
    dx = np.diff(y, axis=1, append=y[:, -1:])
    dy = np.diff(y, axis=0, append=y[-1:, :])
    return (dx**2 + dy**2) / 2


def luma(rgb: np.ndarray) -> np.ndarray:
    from sr.metrics import rgb_to_y

    return rgb_to_y(rgb) if rgb.ndim == 3 else rgb.astype(np.float64)


@dataclass
class Location:
    """Pooled per-block values of one level: budget, repetition and the error gain of B over A."""

    budget: list[np.ndarray] = field(default_factory=list)
    rep: list[np.ndarray] = field(default_factory=list)
    detail: list[np.ndarray] = field(default_factory=list)
    gain: list[np.ndarray] = field(default_factory=list)

    def add(self, hr: np.ndarray, sr_a: np.ndarray, sr_b: np.ndarray, lr: np.ndarray,
            budget: np.ndarray | None, scale: int, block: int) -> None:
        y_hr = luma(hr)
        err = (luma(sr_a) - y_hr) ** 2 - (luma(sr_b) - y_hr) ** 2  # > 0 where B is closer
        gain = block_means(err, block * scale)
        y_lr = luma(lr)
        rep = repetition(y_lr, block)
        detail = block_means(gradient_energy(y_lr), block)
        h, w = min(gain.shape[0], rep.shape[0]), min(gain.shape[1], rep.shape[1])
        self.gain.append(gain[:h, :w].ravel())
        self.rep.append(rep[:h, :w].ravel())
        self.detail.append(detail[:h, :w].ravel())
        if budget is not None:
            self.budget.append(block_means(budget, block)[:h, :w].ravel())

    def summary(self) -> dict:
        if not self.gain:
            return {}
        gain, rep, detail = (np.concatenate(v) for v in (self.gain, self.rep, self.detail))
        out = {"blocks": int(gain.size), "gain_vs_repetition": spearman(rep, gain),
               "top_repetition_gain_share": top_share(rep, gain),
               "gain_vs_detail": spearman(detail, gain), "top_detail_gain_share": top_share(detail, gain)}
        if self.budget:
            budget = np.concatenate(self.budget)
            out |= {"gain_vs_budget": spearman(budget, gain),
                    "top_budget_gain_share": top_share(budget, gain)}
        return out


# -- running the models ----------------------------------------------------------------------------
def _load(name: str, precision: str):
    from sr.weights import WeightsError, load_model

    try:
        desc = load_model(name)
    except WeightsError as e:
        raise CLIError(str(e)) from None
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return desc, desc.net.to(dtype).eval(), dtype


@torch.inference_mode()
def _upscale(net, lr: np.ndarray, dtype: torch.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """(SR uint8 (sH, sW, 3), the budget map (H, W) at LR size or None without adaptive attention)."""
    x = torch.tensor(lr).permute(2, 0, 1)[None].float().div(255).to(dtype)
    aux: dict = {}
    y = net(x, aux)
    sr = y.float().clamp(0, 1).mul(255).round()[0].permute(1, 2, 0).numpy().astype(np.uint8)
    maps = aux.get("budget_maps")
    budget = torch.cat([m.float() for m in maps], 1).mean(1)[0].numpy() if maps else None
    return sr, budget


def _pairs(hr_dir: str, level: str, scale: int, degrade_dir: str) -> list[tuple[Path, Path | None]]:
    from sr.evaluation import list_images, match_lr
    from sr.evaluation.degraded import build_degraded_set, set_folder_name

    hr_files = list_images(hr_dir)
    if level == "clean":
        return [(p, None) for p in hr_files]
    out = Path(degrade_dir) / set_folder_name(hr_dir, level, scale)
    build_degraded_set(hr_dir, out, scale, level)
    return list(zip(hr_files, match_lr(hr_files, list_images(out)), strict=True))


def run(args: argparse.Namespace) -> int:
    from sr.evaluation import load_hr, make_lr, set_names
    from sr.metrics import psnr, ssim
    from sr.resize import modcrop

    levels = [s.strip() for s in args.levels.split(",") if s.strip()]
    if bad := [s for s in levels if s not in LEVELS]:
        raise CLIError(f"unknown level {bad[0]!r}; known: {', '.join(LEVELS)}")
    if args.threads:
        set_threads(args.threads)
    desc_a, net_a, dtype = _load(args.a, args.precision)
    desc_b, net_b, _ = _load(args.b, args.precision)
    if desc_a.scale != args.scale or desc_b.scale != args.scale:
        raise CLIError(f"both models must be x{args.scale} "
                       f"({desc_a.name}: x{desc_a.scale}, {desc_b.name}: x{desc_b.scale})")
    tables: dict = {}
    images: list[dict] = []
    for set_label, hr_dir in zip(set_names([Path(d) for d in args.hr]), args.hr, strict=True):
        per_level: dict[str, Paired] = {}
        for level in levels:
            pairs, loc = Paired(), Location()
            chosen = _pairs(hr_dir, level, args.scale, args.degrade_dir)
            for hr_path, lr_path in chosen[: args.max_images or None]:
                hr = modcrop(load_hr(hr_path), args.scale)
                if hr.ndim == 2:
                    hr = np.repeat(hr[:, :, None], 3, axis=2)
                lr = make_lr(hr, args.scale) if lr_path is None else load_hr(lr_path)
                if lr.ndim == 2:
                    lr = np.repeat(lr[:, :, None], 3, axis=2)
                sr_a, _ = _upscale(net_a, lr[:, :, :3], dtype)
                sr_b, budget = _upscale(net_b, lr[:, :, :3], dtype)
                scores = [(psnr(s, hr, args.scale), ssim(s, hr, args.scale)) for s in (sr_a, sr_b)]
                pairs.add(hr_path.stem, scores[0][0], scores[1][0], scores[0][1], scores[1][1])
                loc.add(hr, sr_a, sr_b, lr[:, :, :3], budget, args.scale, args.block)
                images.append({"set": set_label, "level": level, "image": hr_path.stem,
                               "psnr_a": scores[0][0], "psnr_b": scores[1][0],
                               "ssim_a": scores[0][1], "ssim_b": scores[1][1]})
            per_level[level] = pairs
            tables[f"{set_label}/{level}"] = {**pairs.summary(), "where": loc.summary()}
            print(_row(set_label, level, tables[f"{set_label}/{level}"]), flush=True)
        if all(lv in per_level for lv in BLIND):
            blind = Paired()
            for i, name in enumerate(per_level[BLIND[0]].names):
                blind.add(name, *(statistics.fmean(getattr(per_level[lv], key)[i] for lv in BLIND)
                                  for key in ("a", "b", "ssim_a", "ssim_b")))
            tables[f"{set_label}/blind"] = blind.summary()
            print(_row(set_label, "blind", tables[f"{set_label}/blind"]), flush=True)
    if args.json:
        write_json(args.json, {"a": desc_a.name, "b": desc_b.name, "scale": args.scale,
                               "precision": args.precision, "block": args.block,
                               "tables": tables, "images": images})
    return 0


def _row(set_label: str, level: str, t: dict) -> str:
    where = t.get("where") or {}
    tail = ""
    if where:
        tail = (f"  gain~budget {where.get('gain_vs_budget', float('nan')):+.3f} "
                f"(top-20% {where.get('top_budget_gain_share', float('nan')):.1%})"
                f"  gain~repetition {where['gain_vs_repetition']:+.3f} "
                f"(top-20% {where['top_repetition_gain_share']:.1%})"
                f"  gain~detail {where['gain_vs_detail']:+.3f} "
                f"(top-20% {where['top_detail_gain_share']:.1%})")
    return (f"{set_label:<8} {level:<7} n={t['n']:<3} A {t['psnr_a']:.3f}/{t['ssim_a']:.4f}  "
            f"B {t['psnr_b']:.3f}/{t['ssim_b']:.4f}  B-A {t['diff']:+.4f} +- {t['se']:.4f} "
            f"(wins {t['wins']:g}/{t['n']}){tail}")


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, prog="python -m research.paired")


if __name__ == "__main__":
    raise SystemExit(main())
