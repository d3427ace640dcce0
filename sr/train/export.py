"""A training checkpoint's EMA weights -> a shipped .safetensors file with the run's metadata.

The metadata says what the weights were trained on and for how long, as the run recorded it:
steps and time include the weights a run continued (``--init`` of its own earlier export), the
hardware is the training machine's (not the exporting one's), and validation scores are cited
only when they belong to the exported step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..descriptor import preset_of
from ..models import SRNet, build_config
from ..weights import save_weights
from .config import TrainConfig


class ExportError(ValueError):
    """A checkpoint that cannot be exported (missing, unreadable, not a training checkpoint)."""


@dataclass(frozen=True)
class Exported:
    path: Path
    step: int  # training steps of the exported weights, earlier continued runs included
    validation: dict  # {set: {"psnr", "ssim"}} of the exported step, {} when it was not validated


def load_checkpoint_model(path: str | Path) -> tuple[SRNet, dict]:
    """(network with the checkpoint's EMA weights, checkpoint dict)."""
    path = Path(path)
    if not path.is_file():
        raise ExportError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        cfg = ckpt["config"]
        overrides = {"attention": cfg["attention"]} if cfg.get("attention") else {}
        model = SRNet(build_config(cfg["preset"], cfg["scale"], **overrides))
        model.load_state_dict(ckpt["ema"])
    except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is one clear error here
        raise ExportError(f"{path}: not a usable training checkpoint ({e})") from None
    return model, ckpt


def recipe_metadata(cfg: dict, lineage: dict) -> dict[str, str]:
    """The latest cycle's settings (a --resume can change loss or rescale) and where the run started."""
    recipe = {"loss": cfg.get("loss", TrainConfig.loss)}  # checkpoints older than --loss trained the default
    if cfg.get("rescale"):
        recipe["rescale"] = " ".join(f"{f:g}" for f in cfg["rescale"])
    if cfg.get("rgb_perm"):
        recipe["rgb_perm"] = f"{cfg['rgb_perm']:g}"
    if cfg.get("degrade"):  # the degradation family the LR was made with (sr.data.degrade), and its ranges
        from ..data.degrade import TRAINING_CONFIGS

        known = TRAINING_CONFIGS.get(cfg["degrade"])
        recipe["degrade"] = cfg["degrade"]
        if known is not None:
            recipe["degrade_config"] = json.dumps(known.to_dict())
    if lineage:
        recipe["init"] = lineage["from"] + (f" (step {lineage['steps']})" if lineage.get("steps") else "")
    return recipe


def export_checkpoint(
    checkpoint: str | Path, output: str | Path, hardware: str | None = None, experimental: str | None = None
) -> Exported:
    """Write ``checkpoint``'s EMA weights and metadata to ``output`` (.safetensors), atomically.

    ``experimental``: a note that marks the file as an experimental model (``sr info`` shows it)."""
    if not Path(checkpoint).is_file():
        raise ExportError(f"checkpoint not found: {checkpoint}")
    if not str(output).endswith(".safetensors"):
        raise ExportError("output must end in .safetensors")
    model, ckpt = load_checkpoint_model(checkpoint)
    cfg = ckpt["config"]
    lineage = ckpt.get("lineage") or {}
    # a run that continues exported weights counts their steps and time as its own past
    past = lineage if lineage.get("continues") else {}
    past_steps, past_seconds = past.get("steps", 0), past.get("seconds", 0.0)
    step = past_steps + ckpt["step"]
    best = ckpt.get("best") or {}
    # cite only a validation of the exported weights themselves: last.pt's step is often not the best step
    # (best is checked too because checkpoints written before last_val existed only carry best)
    validated = next((v for v in (best, ckpt.get("last_val") or {}) if v.get("step") == ckpt["step"]), {})
    extra = {"experimental": experimental} if experimental else {}
    out = save_weights(
        model, output,
        # a run that overrode the preset's attention names the preset its network is (conv-base for
        # asa-base without attention), not the one it was built from
        preset=preset_of(model.cfg) if cfg.get("attention") else cfg["preset"],
        attention=model.cfg.attention, name=cfg["name"],
        train_data=json.dumps(cfg["train"]), steps=str(step),
        batch=str(cfg["batch"]), patch=str(cfg["patch"]),
        train_seconds=f"{past_seconds + ckpt.get('elapsed', 0.0):.0f}",
        # the training machine, as the run recorded it (not this one: export often runs elsewhere)
        hardware=hardware or ckpt.get("hardware") or "not recorded (checkpoint predates the record)",
        validation=json.dumps(validated.get("results", {})),
        best_step=str(past_steps + best.get("step", ckpt["step"])),
        **recipe_metadata(cfg, lineage),
        **extra,
    )
    return Exported(out, step, validated.get("results", {}))
