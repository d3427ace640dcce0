"""One dataclass holds every training setting; a TOML file and CLI flags fill it in."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass
class TrainConfig:
    name: str = "asa-base-x2"
    preset: str = "asa-base"
    scale: int = 2
    attention: str | None = None  # override the preset's attention (ablations)
    # Folders of HR images. No default: a path that only exists in one checkout's surroundings is no
    # default; the trainer says --train is missing. ``val`` may stay empty (no validation, no best.pt).
    train: list[str] = field(default_factory=list)
    val: list[str] = field(default_factory=list)
    # LR folders, one per --val folder, matched by file name (a degraded set from `sr degrade`); empty:
    # the validation LR is made from HR with MATLAB bicubic
    val_lr: list[str] = field(default_factory=list)
    # "" = the clean bicubic protocol; a name from sr.data.degrade.TRAINING_CONFIGS (e.g. "photo") =
    # train on a seeded pool of `pool` degraded patch pairs made at the start (sr.data.pool)
    degrade: str = ""
    pool: int = 20_000
    patch: int = 48  # LR patch side
    rescale: list[float] = field(default_factory=list)  # extra HR copies downscaled by these factors
    rgb_perm: float = 0.0  # share of crops whose RGB channels are reordered (colour augmentation)
    batch: int = 16
    steps: int = 100_000
    lr: float = 1e-3
    min_lr: float = 1e-6
    warmup: int = 300
    cycle_start: int = 0  # step where warm-up + cosine begin; a resumed run's step = warm restart (SGDR)
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    budget_weight: float = 0.01
    loss: str = "l1"  # pixel loss: l1 | mse (a short low-lr mse fine-tune after l1 targets PSNR directly)
    val_every: int = 1000
    best_on: str = "mean"  # best.pt ranks validations by PSNR: "mean" over the --val sets, or one set's name
    ckpt_every: int = 250
    time_limit: float = 0.0  # wall-clock minutes per start or --resume, then checkpoint and stop; 0 = none
    cpu_hours: float = 0.0  # stop once the training steps used this much CPU time, all resumes; 0 = none
    log_every: int = 25
    seed: int = 0
    workers: int = 0
    threads: int = 0  # 0 = all cores
    amp: str = "auto"  # auto (bf16 on CUDA and on AMX CPUs) | bf16 | off
    device: str = "auto"
    out: str = "runs"
    cache: str = "runs/cache"
    init: str | None = None  # weights/checkpoint to start from (e.g. x2 weights for x3/x4)
    init_layers: str = "all"  # what --init copies: all | conv (attention blocks start fresh: ablations)
    # The perceptual fine-tune (sr.train.adversarial): gan_weight > 0 trains a U-Net discriminator beside
    # the model and adds these terms to the pixel loss; 0 = pixel loss only (the fidelity models).
    gan_weight: float = 0.0
    feature_weight: float = 1.0  # discriminator feature matching (only with gan_weight > 0)
    frequency_weight: float = 0.0  # L1 between the 2-D spectra
    artefact_weight: float = 1.0  # LDL artefact-weighted L1 (only with gan_weight > 0)
    # where a --degrade pool's patches start in their source image: "lr", on a multiple of the scale
    # (every patch then holds the source's own grid, a JPEG's 8 x 8 blocks, on the same output phases
    # at x4), or "any" pixel (sr.data.pool.make_pool)
    crop_start: str = "lr"
    # L1 between output's and HR's per-output-phase high-pass means in grey levels: no grid-locked
    # dot lattice (sr.train.adversarial.phase_loss); 0 = off
    phase_weight: float = 0.0
    # local high-pass energy of the output beyond HR's own on HR's smooth pixels, in grey levels: no
    # texture or noise invented on flat areas (sr.train.adversarial.flat_loss); 0 = off
    flat_weight: float = 0.0
    disc_width: int = 16  # the discriminator's channels at full resolution
    disc_lr: float = 1e-4
    # keep an EMA snapshot (snap-STEP.pt, best.pt's format) every N steps: a perceptual run is chosen
    # afterwards on valid by perceptual metrics, which validation PSNR does not rank; 0 = none
    snapshot_every: int = 0

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / self.name

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)


AMP_CHOICES = ("auto", "bf16", "off")
LOSS_CHOICES = ("l1", "mse")
INIT_LAYER_CHOICES = ("all", "conv")
CROP_START_CHOICES = ("lr", "any")
FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def load_config(path: str | Path | None = None, **overrides) -> TrainConfig:
    """Defaults <- TOML file (``[train]`` table or top level) <- overrides that are not None."""
    values: dict = {}
    if path is not None:
        data = tomllib.loads(Path(path).read_text())
        data = data.get("train", data)
        unknown = set(data) - set(FIELDS)
        if unknown:
            raise ValueError(f"{path}: unknown training settings: {', '.join(sorted(unknown))}")
        values.update(data)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return TrainConfig(**values)
