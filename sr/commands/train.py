"""``sr train``: a TOML config and/or flags over :class:`sr.train.TrainConfig`."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from ..errors import CLIError
from ..train.config import (
    AMP_CHOICES,
    CROP_START_CHOICES,
    FIELDS,
    INIT_LAYER_CHOICES,
    LOSS_CHOICES,
    load_config,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file with training settings ([train] table or top level)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR exactly (flags may extend --steps)")
    for name, f in FIELDS.items():
        flag = "--" + name.replace("_", "-")
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        if name == "train":
            p.add_argument(flag, nargs="*", default=None, metavar="DIR",
                           help="folders of HR training images, searched recursively (required, here or "
                                "as train = [...] in --config)")
        elif name == "val":
            p.add_argument(flag, nargs="*", default=None, metavar="DIR",
                           help="folders of HR validation images, one set each (default: none = no "
                                "validation and no best.pt)")
        elif name == "val_lr":
            p.add_argument(flag, nargs="*", default=None, metavar="DIR",
                           help="LR folders, one per --val folder, matched by file name (e.g. a degraded "
                                "set made by `sr degrade`; default: bicubic LR made from each HR)")
        elif name == "degrade":
            from ..data.degrade import TRAINING_CONFIGS

            p.add_argument(flag, choices=("", *TRAINING_CONFIGS), default=None,
                           help="train on degraded input (blur, resize kernels, noise, JPEG; 25%% clean) "
                                "from a seeded pool of --pool patch pairs (default: clean bicubic LR)")
        elif name == "rescale":
            p.add_argument(flag, nargs="*", type=float, default=None, metavar="FACTOR",
                           help="also train on each HR image downscaled by these factors in (0, 1), "
                                "e.g. 0.9 0.8 0.7 0.6 (default: none)")
        elif name == "rgb_perm":
            p.add_argument(flag, type=float, default=None, metavar="SHARE",
                           help="share of crops, in [0, 1], whose RGB channels are reordered: colour "
                                "augmentation for a small training set (default: 0)")
        elif name == "amp":
            p.add_argument(flag, choices=AMP_CHOICES, default=None,
                           help="bf16 autocast; auto = on CUDA and AMX CPUs, else fp32 (default: auto)")
        elif name == "crop_start":
            p.add_argument(flag, choices=CROP_START_CHOICES, default=None,
                           help="where --degrade pool patches start in their source: on its LR grid, or "
                                "at any pixel, so a grid in the source (JPEG blocks) is not locked to the "
                                "patch's and cannot be learnt as a dot lattice (default: lr)")
        elif name == "flat_weight":
            p.add_argument(flag, type=float, default=None, metavar="W",
                           help="weight of a term against texture or noise invented on flat areas: on "
                                "HR's smooth pixels, the output's local high-pass energy beyond HR's "
                                "own, in grey levels (default: 0 = off)")
        elif name == "loss":
            p.add_argument(flag, choices=LOSS_CHOICES, default=None, help=f"pixel loss (default: {default})")
        elif name == "init_layers":
            p.add_argument(flag, choices=INIT_LAYER_CHOICES, default=None,
                           help="what --init copies: all matching layers, or conv layers only, the "
                                "attention blocks starting fresh (an ablation's common start; default: all)")
        elif name == "cpu_hours":
            p.add_argument(flag, type=float, default=None, metavar="HOURS",
                           help="stop (checkpoint, validate) once the training steps have used this much "
                                "CPU time in all, over every --resume: equal compute for runs that share a "
                                "machine (default: 0 = no limit)")
        elif name == "best_on":
            p.add_argument(flag, metavar="SET", default=None,
                           help="best.pt = highest validation PSNR: 'mean' over the --val sets or one "
                                "set's name as sr eval prints it, e.g. Set14 (default: mean)")
        else:
            kind = {int: int, float: float}.get(type(default), str)
            p.add_argument(flag, type=kind, default=None, help=f"(default: {default})")


def run(args: argparse.Namespace) -> int:
    from ..evaluation import set_name
    from ..train.loop import Trainer

    overrides = {name: getattr(args, name) for name in FIELDS}
    try:
        if args.resume:
            run_dir = Path(args.resume)
            saved = run_dir / "config.json"
            if not saved.is_file():
                raise CLIError(f"{run_dir} has no config.json: not a training run")
            base = json.loads(saved.read_text())
            if "best_on" not in base:  # runs from before --best-on ranked on their first --val set
                base["best_on"] = set_name(base["val"][0]) if base.get("val") else "mean"
            base.update({k: v for k, v in overrides.items() if v is not None})
            cfg = load_config(None, **base)
        else:
            cfg = load_config(args.config, **overrides)
        trainer = Trainer(cfg, resume=bool(args.resume))
        best = trainer.fit()
    except (FileNotFoundError, ValueError) as e:
        raise CLIError(str(e)) from None
    if best:
        scores = ", ".join(f"{k} {v['psnr']:.3f} dB" for k, v in best["results"].items())
        rule = best.get("on", cfg.best_on)  # a run from before --best-on holds a best without "on"
        print(f"best.pt: step {best['step']} ({scores}; ranked on {rule}) in {cfg.run_dir}")
    return 0
