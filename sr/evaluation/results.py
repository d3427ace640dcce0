"""Scored sets as files: JSON and CSV of per-image and per-set results, the blind means of degraded
sets, each written atomically once everything is scored (never a partial results file)."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..io import atomic_write
from .protocol import set_name
from .sets import SetResult

# the levels whose mean is the "blind" row: unknown blur, noise and JPEG (web is resize + JPEG only)
BLIND_LEVELS = ("mild", "medium", "heavy")


@dataclass
class BlindMean:
    """The mean of one HR folder's mild/medium/heavy sets (each set's mean, then their mean)."""

    name: str
    hr_dir: Path
    levels: list[str]
    psnr: float
    ssim: float
    images: int
    perceptual: dict[str, float] = field(default_factory=dict)  # each perceptual metric's, likewise


def blind_means(results: list[SetResult], levels: dict[str, str], scale: int) -> list[BlindMean]:
    """Per HR folder, the mean of its mild/medium/heavy sets' means when more than one was scored.
    ``levels``: set name -> degradation level."""
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
            {m: float(np.mean([r.mean(m) for r in rs])) for m in rs[0].metrics},
        ))
    return out


def _num(x: float) -> float | None:
    # JSON has no infinity: an exact reconstruction's PSNR is written as null.
    return x if math.isfinite(x) else None


def results_json(
    results: list[SetResult], header: dict, levels: dict[str, str] | None = None,
    blind: list[BlindMean] | None = None,
) -> str:
    """``levels``: set name -> degradation level of the --degrade sets; ``blind``: their blind means.
    Perceptual metrics (a set's ``metrics``) follow ``ssim`` in each set, image and blind mean."""
    sets = []
    for r in results:
        entry = {
            "name": r.plan.name,
            "hr": str(r.plan.hr_dir),
            "lr": str(r.plan.lr_dir) if r.plan.lr_dir else None,
        }
        if levels:
            entry["level"] = levels.get(r.plan.name)
        per_image = [{"image": n, "psnr": _num(p), "ssim": s} for n, p, s in r.rows]
        for row, scores in zip(per_image, r.perceptual, strict=bool(r.metrics)):
            row.update({m: _num(v) for m, v in scores.items()})
        sets.append({
            **entry,
            "images": len(r.rows),
            "psnr": _num(r.psnr),
            "ssim": r.ssim,
            **{m: _num(r.mean(m)) for m in r.metrics},
            "seconds": round(r.seconds, 3),
            "per_image": per_image,
        })
    doc = {**header, "sets": sets}
    if blind is not None:
        doc["blind_means"] = [
            {"name": b.name, "hr": str(b.hr_dir), "levels": b.levels, "images": b.images,
             "psnr": _num(b.psnr), "ssim": b.ssim, **{m: _num(v) for m, v in b.perceptual.items()}}
            for b in blind
        ]
    return json.dumps(doc, indent=2) + "\n"


def results_csv(results: list[SetResult], blind: list[BlindMean] | None = None) -> str:
    """Rows of kind ``image`` and ``mean`` per set, then one ``blind-mean`` row per blind mean; a
    column per perceptual metric after ``ssim`` when the sets were scored with any."""
    metrics = results[0].metrics if results else ()
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["set", "kind", "image", "psnr", "ssim", *metrics])
    for r in results:
        for i, (n, p, s) in enumerate(r.rows):
            w.writerow([r.plan.name, "image", n, f"{p:.4f}", f"{s:.4f}",
                        *(f"{r.perceptual[i][m]:.4f}" for m in metrics)])
        w.writerow([r.plan.name, "mean", "", f"{r.psnr:.4f}", f"{r.ssim:.4f}",
                    *(f"{r.mean(m):.4f}" for m in metrics)])
    for b in blind or []:
        w.writerow([b.name, "blind-mean", "", f"{b.psnr:.4f}", f"{b.ssim:.4f}",
                    *(f"{b.perceptual[m]:.4f}" for m in metrics)])
    return buf.getvalue()


def write_file(path: Path, data: bytes) -> None:
    """``data`` to ``path`` whole or not at all, its folder made if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)
