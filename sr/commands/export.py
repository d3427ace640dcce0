"""``sr export CKPT -o weights/NAME.safetensors``: EMA weights of a checkpoint + metadata.

``sr export --onnx MODEL -o model.onnx``: a shipped model or .safetensors file as an ONNX graph
(dynamic height and width, the budget at its trained value; :mod:`sr.inference.onnx_export`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..cli import CLIError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="best.pt or last.pt of a training run; with --onnx, a shipped model "
                                      "name (e.g. asa-base-x2) or a .safetensors file")
    p.add_argument("-o", "--output", required=True, help="output .safetensors path (.onnx with --onnx)")
    p.add_argument("--onnx", action="store_true",
                   help="export a trained model to ONNX (needs the extra: pip install -e '.[onnx]')")
    p.add_argument("--hardware", default=None,
                   help="hardware note for the metadata (default: what the checkpoint recorded training on)")


def run(args: argparse.Namespace) -> int:
    if args.onnx:
        return _run_onnx(args)
    import torch

    from ..models import SRNet, build_config
    from ..train.config import TrainConfig
    from ..weights import save_weights

    path = Path(args.checkpoint)
    if not path.is_file():
        raise CLIError(f"checkpoint not found: {path}")
    if not args.output.endswith(".safetensors"):
        raise CLIError("output must end in .safetensors")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        cfg = ckpt["config"]
        overrides = {"attention": cfg["attention"]} if cfg.get("attention") else {}
        model = SRNet(build_config(cfg["preset"], cfg["scale"], **overrides))
        model.load_state_dict(ckpt["ema"])
    except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is a user-facing error here
        raise CLIError(f"{path}: not a usable training checkpoint ({e})") from None
    # the run's config holds the settings of its latest cycle (a --resume can change loss or rescale)
    recipe = {"loss": cfg.get("loss", TrainConfig.loss)}  # checkpoints older than --loss trained the default
    if cfg.get("rescale"):
        recipe["rescale"] = " ".join(f"{f:g}" for f in cfg["rescale"])
    if cfg.get("rgb_perm"):
        recipe["rgb_perm"] = f"{cfg['rgb_perm']:g}"
    lineage = ckpt.get("lineage") or {}
    if lineage:
        recipe["init"] = lineage["from"] + (f" (step {lineage['steps']})" if lineage.get("steps") else "")
    # a run that continues exported weights counts their steps and time as its own past
    past = lineage if lineage.get("continues") else {}
    past_steps, past_seconds = past.get("steps", 0), past.get("seconds", 0.0)
    step = past_steps + ckpt["step"]
    best = ckpt.get("best") or {}
    # cite only a validation of the exported weights themselves: last.pt's step is often not the best step
    # (best is checked too because checkpoints written before last_val existed only carry best)
    validated = next((v for v in (best, ckpt.get("last_val") or {}) if v.get("step") == ckpt["step"]), {})
    out = save_weights(
        model, args.output,
        preset=cfg["preset"], attention=model.cfg.attention, name=cfg["name"],
        train_data=json.dumps(cfg["train"]), steps=str(step),
        batch=str(cfg["batch"]), patch=str(cfg["patch"]),
        train_seconds=f"{past_seconds + ckpt.get('elapsed', 0.0):.0f}",
        # the training machine, as the run recorded it (not this one: export often runs elsewhere)
        hardware=args.hardware or ckpt.get("hardware") or "not recorded (checkpoint predates the record)",
        validation=json.dumps(validated.get("results", {})),
        best_step=str(past_steps + best.get("step", ckpt["step"])),
        **recipe,
    )
    if validated:
        scores = ", ".join(f"{k} {v['psnr']:.3f} dB" for k, v in validated["results"].items())
        print(f"wrote {out} (step {step}: {scores})")
    else:
        print(f"wrote {out} (step {step}, not validated at that step: no validation in the metadata)")
    return 0


def _run_onnx(args: argparse.Namespace) -> int:
    from ..inference.onnx_export import OnnxUnavailable, export_onnx
    from ..weights import WeightsError

    if not args.output.endswith(".onnx"):
        raise CLIError("with --onnx, the output must end in .onnx")
    out = Path(args.output)
    if not out.parent.is_dir():
        raise CLIError(f"output folder not found: {out.parent}")
    try:
        written = export_onnx(args.checkpoint, out)
    except (OnnxUnavailable, WeightsError) as e:
        raise CLIError(str(e)) from None
    print(f"wrote {written} ({written.stat().st_size / 2**20:.1f} MiB; input float32 NCHW RGB in [0, 1], "
          "any height and width)")
    return 0
