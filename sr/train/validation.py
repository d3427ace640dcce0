"""Validation during training: PSNR/SSIM per --val set, and which validation best.pt keeps."""

from __future__ import annotations

from pathlib import Path

import torch

from ..evaluation import model_upscaler, plan_sets, score_pairs, set_name
from ..models import SRNet
from .config import TrainConfig


def validate(model: SRNet, cfg: TrainConfig, device: torch.device) -> dict[str, dict[str, float]]:
    """Mean PSNR/SSIM per --val set: on bicubic LR made from HR, or on the --val-lr folders' files."""
    model.eval()
    upscale = model_upscaler(model, device)
    results = {}
    for plan in plan_sets(cfg.val, cfg.val_lr or None, cfg.scale):
        rows = [(p, s) for _, _, p, s, _ in score_pairs(plan, upscale, cfg.scale)]
        results[val_set_name(plan.hr_dir, plan.lr_dir)] = {
            "psnr": sum(r[0] for r in rows) / len(rows), "ssim": sum(r[1] for r in rows) / len(rows),
        }
    return results


def val_set_name(hr_dir: str | Path, lr_dir: str | Path | None) -> str:
    """A validation set's name in logs: the HR folder's, or the LR folder's when LR files are given
    (one HR folder is often validated under several degradations)."""
    return set_name(lr_dir) if lr_dir else set_name(hr_dir)


def selection_score(results: dict[str, dict[str, float]], best_on: str) -> float | None:
    """The PSNR that ranks validations for best.pt: the mean over the sets (one 5-image set alone
    picked noise spikes), or the named set's. None when ``results`` lack that set."""
    if best_on == "mean":
        return sum(v["psnr"] for v in results.values()) / len(results) if results else None
    return results[best_on]["psnr"] if best_on in results else None


def ranked_best(best: dict, results: dict[str, dict[str, float]], best_on: str, step: int) -> dict | None:
    """The new best record ``{"step", "on", "results"}`` when ``results`` beat the held ``best`` under
    ``best_on``, else None. The held best is re-scored from its own results: a resume may change
    --best-on."""
    score = selection_score(results, best_on)
    held = selection_score(best.get("results", {}), best_on)
    if held is None or score > held:
        return {"step": step, "on": best_on, "results": results}
    return None
