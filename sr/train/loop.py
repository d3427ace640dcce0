"""The training loop: L1/MSE + budget loss, AdamW, warm-up + cosine, clipping, EMA, validation, checkpoints.

Runs on one CPU, one GPU, or K processes under ``torchrun`` (DDP; gloo on CPU, nccl on CUDA). Only
rank 0 validates, logs and writes checkpoints. SIGINT/SIGTERM finish the current step, write a
checkpoint and exit; ``--resume`` continues exactly (model, EMA, optimiser, step, data order).
"""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from ..data import PatchDataset, PatchSampler, build_pairs, check_rescale, check_rgb_perm
from ..data.degrade import training_config
from ..data.pool import build_pool
from ..evaluation import model_upscaler, plan_sets, score_pairs, set_name
from ..inference.devices import cpu_has_amx, resolve_device, usable_cpus
from ..io import atomic_write
from ..models import SRNet, build_config, count_params
from ..weights import WeightsError, read_metadata
from .adversarial import (
    UNetDiscriminator,
    adversarial_loss,
    artefact_loss,
    artefact_map,
    feature_matching_loss,
    frequency_loss,
    phase_loss,
)
from .config import AMP_CHOICES, INIT_LAYER_CHOICES, LOSS_CHOICES, TrainConfig

PIXEL_LOSSES = {"l1": F.l1_loss, "mse": F.mse_loss}  # keyed as LOSS_CHOICES (the flag's choices)


def use_bf16_autocast(amp: str, device: torch.device) -> bool:
    """``--amp``: 'bf16' / 'off' as given; 'auto' = bf16 where it was measured to pay: on CUDA, and on
    CPUs with AMX (1.55x the asa-base steps per second at equal PSNR on an AMX Xeon). Other CPUs stay
    fp32: on an AVX2 EPYC bf16 was far slower (8.7 s against 0.6 s a step), the rest is unmeasured."""
    if amp not in AMP_CHOICES:
        raise ValueError(f"--amp {amp!r} is not one of: {', '.join(AMP_CHOICES)}")
    if amp != "auto":
        return amp == "bf16"
    return device.type == "cuda" or (device.type == "cpu" and cpu_has_amx())


def lr_at(step: int, cfg: TrainConfig, cpu_seconds: float = 0.0) -> float:
    """Linear warm-up then cosine to ``min_lr`` at ``steps``, both counted from ``cycle_start``.

    With a CPU budget (``cpu_hours``) the cosine runs over CPU time instead: its position is the
    share of the budget spent, so runs of an equal-compute comparison all anneal fully, whatever
    their step costs (``steps`` is then only an upper bound).
    """
    step = max(0, step - cfg.cycle_start)
    span = cfg.steps - cfg.cycle_start
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.cpu_hours > 0:
        t = min(1.0, cpu_seconds / (cfg.cpu_hours * 3600))
    else:
        t = min(1.0, (step - cfg.warmup) / max(1, span - cfg.warmup))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * t))


def atomic_save(obj, path: Path) -> None:
    atomic_write(path, lambda f: torch.save(obj, f))


def _body_layout(keys) -> dict[int, bool]:
    """Body index -> whether that layer is an attention block, read from state-dict keys."""
    layout: dict[int, bool] = {}
    for key in keys:
        parts = key.split(".")
        if len(parts) > 2 and parts[0] == "body" and parts[1].isdigit():
            i = int(parts[1])
            layout[i] = layout.get(i, False) or parts[2] == "qkv"  # every attention branch has a qkv conv
    return layout


def _align_body(state: dict, model: SRNet, attention: bool) -> dict:
    """Rename the checkpoint's body layers to the model's by their order among layers of their kind.

    The body interleaves residual blocks and attention blocks, so a network of another attention
    kind (``none`` has no attention layers) numbers the same residual blocks differently: the n-th
    residual block goes to the n-th residual block, the n-th attention block to the n-th attention
    block (or is dropped when ``attention`` is False).
    """
    theirs = _body_layout(state)
    ours = {i: hasattr(layer, "attend") for i, layer in enumerate(model.body)}
    rename: dict[int, int | None] = {}
    for is_attn in (False, True):
        src = sorted(i for i, a in theirs.items() if a == is_attn)
        dst = sorted(i for i, a in ours.items() if a == is_attn)
        for n, i in enumerate(src):
            rename[i] = dst[n] if n < len(dst) and (attention or not is_attn) else None
    out = {}
    for key, value in state.items():
        parts = key.split(".")
        if len(parts) > 2 and parts[0] == "body" and parts[1].isdigit():
            target = rename[int(parts[1])]
            if target is None:
                continue
            key = ".".join(["body", str(target), *parts[2:]])
        out[key] = value
    return out


def load_init(model: SRNet, path: str, layers: str = "all") -> list[str]:
    """Copy every tensor whose name and shape match (e.g. x2 weights into an x3 model).

    Body layers are matched by their order among residual blocks and among attention blocks
    (:func:`_align_body`), so conv weights carry over between attention kinds too. ``layers="conv"``
    leaves every attention block fresh (the common start of an ablation). Body layers the checkpoint
    lacks entirely (a deeper preset grown from a shallower one) start as identity, their residual
    output zeroed, so the grown network computes what the loaded one did.
    """
    if layers not in INIT_LAYER_CHOICES:
        raise ValueError(f"--init-layers {layers!r} is not one of: {', '.join(INIT_LAYER_CHOICES)}")
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        state = load_file(path)
    else:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        state = ckpt.get("ema", ckpt.get("model", ckpt))
    state = _align_body(state, model, attention=layers == "all")
    own = model.state_dict()
    taken = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    if not taken:
        raise ValueError(f"--init {path} shares no tensor (name and shape) with the model being trained")
    own.update(taken)
    model.load_state_dict(own)
    fresh = set(own) - set(taken)
    for i, layer in enumerate(model.body):
        grown = all(f"body.{i}.{k}" in fresh for k in layer.state_dict())
        # a fresh attention block of a conv-only start keeps its own near-zero init, like any new branch
        if grown and not (layers == "conv" and hasattr(layer, "attend")):
            layer.start_as_identity()
    return sorted(fresh)


def init_lineage(path: str, model: SRNet, layers: str = "all") -> dict:
    """What an ``--init`` file had been trained for already.

    Our own exported weights of exactly this network (their metadata's architecture config) mean
    the run continues them (a new cycle from shipped weights after the run's checkpoints are gone):
    their steps and training time carry on into this run's export. Any other start (x2 weights for
    an x3 run, a grown preset, a foreign file) only names where it came from.
    """
    lineage: dict = {"from": Path(path).name, "steps": 0, "seconds": 0.0, "continues": False}
    if not path.endswith(".safetensors"):
        return lineage
    try:
        meta = read_metadata(path)
        lineage.update(steps=int(meta["steps"]), seconds=float(meta.get("train_seconds", 0.0)))
        # a conv-only start drops the file's attention: not a continuation even of the same network
        lineage["continues"] = layers == "all" and json.loads(meta["config"]) == model.cfg.to_dict()
    except (WeightsError, KeyError, ValueError):  # weights without our training metadata
        pass
    return lineage


@torch.no_grad()
def ema_update(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    # one multi-tensor kernel per step on a GPU, not one small launch per parameter
    ema_params, params = list(ema.parameters()), [p.detach() for p in model.parameters()]
    if len(ema_params) != len(params):
        raise ValueError("EMA and model differ in their parameters")
    torch._foreach_lerp_(ema_params, params, 1 - decay)
    for e, b in zip(ema.buffers(), model.buffers(), strict=True):
        e.copy_(b)


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


def training_pairs(cfg: TrainConfig) -> tuple[list, dict]:
    """The (HR, LR) arrays PatchDataset samples, and what the start log records of them: whole images
    with bicubic LR, or with --degrade a seeded pool of degraded patch pairs (each cropped whole)."""
    if cfg.degrade:
        pairs, info = build_pool(
            cfg.train, cfg.scale, cfg.patch, cfg.pool, cfg.seed, training_config(cfg.degrade), cfg.cache
        )
        return pairs, {"images": len(pairs), "skipped_small": 0, "degrade": cfg.degrade, **info}
    pairs, skipped = build_pairs(cfg.train, cfg.scale, cfg.patch, cfg.cache, cfg.rescale)
    return pairs, {"images": len(pairs), "skipped_small": skipped}


def selection_score(results: dict[str, dict[str, float]], best_on: str) -> float | None:
    """The PSNR that ranks validations for best.pt: the mean over the sets (one 5-image set alone
    picked noise spikes), or the named set's. None when ``results`` lack that set."""
    if best_on == "mean":
        return sum(v["psnr"] for v in results.values()) / len(results) if results else None
    return results[best_on]["psnr"] if best_on in results else None


def training_hardware(device: torch.device, world: int = 1) -> str:
    """What this run trains on, for the exported metadata: e.g. 'NVIDIA H200 x1' or 'x86_64 CPU x2'."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} x{world}"
    host = platform.processor() or platform.machine()
    return f"{host} CPU x{torch.get_num_threads() * world}"


def cpu_threads(requested: int, world: int) -> int:
    """Intra-op threads per training process: ``requested``, else the usable CPUs (affinity and
    container limits, not os.cpu_count's whole machine) shared among the ``world`` processes."""
    return requested or max(1, usable_cpus() // world)


def check_config(cfg: TrainConfig) -> None:
    """ValueError for a configuration that cannot train, before any data is read or process set up."""
    if not 0 <= cfg.cycle_start < cfg.steps:
        raise ValueError(f"--cycle-start {cfg.cycle_start} must lie in [0, --steps {cfg.steps})")
    check_rescale(cfg.rescale)
    check_rgb_perm(cfg.rgb_perm)
    if cfg.gan_weight < 0 or cfg.snapshot_every < 0 or cfg.phase_weight < 0:
        raise ValueError("--gan-weight, --phase-weight and --snapshot-every must be >= 0")
    if cfg.gan_weight > 0 and (cfg.patch * cfg.scale) % 8:
        raise ValueError(f"--gan-weight needs an HR patch side (--patch x --scale = "
                         f"{cfg.patch * cfg.scale}) that is a multiple of 8 (the discriminator's "
                         "three stride-2 steps)")
    if cfg.loss not in LOSS_CHOICES:
        raise ValueError(f"--loss {cfg.loss!r} is not one of: {', '.join(LOSS_CHOICES)}")
    if cfg.degrade:
        training_config(cfg.degrade)  # an unknown name fails here, before any data is read
        if cfg.rescale:
            raise ValueError("--rescale applies to the clean image pairs; the --degrade pool does not "
                             "take it (leave one of them out)")
    if cfg.val_lr and len(cfg.val_lr) != len(cfg.val):
        raise ValueError(f"--val-lr needs one folder per --val folder ({len(cfg.val)} --val, "
                         f"{len(cfg.val_lr)} --val-lr)")
    val_names = [val_set_name(hr, lr) for hr, lr in zip(cfg.val, cfg.val_lr or [None] * len(cfg.val),
                                                            strict=True)]
    if len(set(val_names)) < len(val_names):  # the names key the logged and ranked results
        raise ValueError(f"--val folders need distinct names, got: {', '.join(val_names)}")
    if val_names and cfg.best_on != "mean" and cfg.best_on not in val_names:
        raise ValueError(
            f"--best-on {cfg.best_on!r} names no --val set; use mean or one of: {', '.join(val_names)}"
        )


class _LogWindow:
    """The sums over the steps since the last log line. Loss and budget add up on the device and
    are read at each log line: a read every step would make the host wait for the GPU to finish it
    before queueing the next one."""

    def __init__(self, device: torch.device) -> None:
        self.zero = torch.zeros((), device=device)
        self.reset(time.time())

    def reset(self, now: float) -> None:
        self.t_last, self.loss_sum, self.budget_sum, self.n = now, self.zero.clone(), self.zero.clone(), 0
        self.data_seconds = 0.0  # time spent waiting for batches
        self.extra_sums: dict[str, torch.Tensor] = {}  # the perceptual fine-tune's loss terms, likewise

    def add(self, pixel: torch.Tensor, aux: dict) -> None:
        self.loss_sum += pixel
        for key in ("gan", "feature", "artefact", "phase", "disc"):
            if key in aux:
                self.extra_sums[key] = self.extra_sums.get(key, self.zero) + aux[key].float()
        maps = aux.get("budget_maps")
        if maps:
            self.budget_sum += torch.stack([m.detach().float().mean() for m in maps]).mean()
        self.n += 1


class Trainer:
    def __init__(self, cfg: TrainConfig, resume: bool = False) -> None:
        check_config(cfg)
        self.cfg = cfg
        bf16 = self._set_up_processes()
        torch.manual_seed(cfg.seed)
        self.is_main = self.rank == 0
        self.hardware = training_hardware(self.device, self.world)  # sr export records it
        self.run_dir = cfg.run_dir
        self.stop_requested = False
        self._build(bf16)
        self.best: dict = {}
        self.last_val: dict = {}  # latest validation {"step", "results"}: an export of last.pt cites it
        self.elapsed = 0.0  # training seconds over all sessions (for the model card)
        self.cpu_elapsed = 0.0  # CPU seconds of the training steps over all sessions (--cpu-hours)
        self.lineage: dict = {}  # the --init weights' own training (init_lineage)
        self._start_from(resume)
        if self.world > 1:
            self.net = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )

    def _set_up_processes(self) -> bool:
        """This process's rank, world and device (torchrun's, under DDP: its process group joined)
        and its threads; whether the steps run under bf16 autocast."""
        cfg = self.cfg
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.device = resolve_device(cfg.device)
        bf16 = use_bf16_autocast(cfg.amp, self.device)
        if self.world > 1:
            local = int(os.environ.get("LOCAL_RANK", "0"))
            if self.device.type == "cuda" and local >= torch.cuda.device_count():
                raise ValueError(
                    f"torchrun's process {local} has no GPU of its own ({torch.cuda.device_count()} CUDA "
                    "device(s) here): use --nproc_per_node up to that number, or --device cpu"
                )
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            dist.init_process_group(backend)
            if self.device.type == "cuda":
                self.device = torch.device("cuda", local)
                torch.cuda.set_device(self.device)
        if self.device.type == "cpu":
            torch.set_num_threads(cpu_threads(cfg.threads, self.world))
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # fixed patch shapes: tune each conv once
        return bf16

    def _start_from(self, resume: bool) -> None:
        """Resume from last.pt, refuse a folder that holds another run, or start from --init."""
        cfg = self.cfg
        if resume:
            self._load(self.run_dir / "last.pt")
        elif (self.run_dir / "last.pt").exists() or (self.run_dir / "log.jsonl").exists():
            # never mix two runs' checkpoints and logs in one folder
            raise ValueError(
                f"{self.run_dir} already holds a training run; continue it with --resume {self.run_dir} "
                "or choose another --name/--out"
            )
        elif cfg.init:
            missing = load_init(self.model, cfg.init, cfg.init_layers)
            self.ema.load_state_dict(self.model.state_dict())
            self.lineage = init_lineage(cfg.init, self.model, cfg.init_layers)
            self.log_line(
                {"event": "init", "from": cfg.init, "fresh_tensors": missing, "lineage": self.lineage}
            )

    @classmethod
    def for_steps(
        cls, cfg: TrainConfig, device: torch.device, memory_format: torch.memory_format = torch.channels_last
    ) -> Trainer:
        """A trainer for :meth:`train_step` alone (``sr bench train``): model, EMA and optimiser on
        ``device``, seeded from ``cfg``; no data, run folder, DDP, thread or cuDNN settings."""
        trainer = cls.__new__(cls)
        trainer.cfg, trainer.device = cfg, torch.device(device)
        torch.manual_seed(cfg.seed)
        trainer._build(use_bf16_autocast(cfg.amp, trainer.device), memory_format)
        return trainer

    def _build(self, bf16: bool, memory_format: torch.memory_format = torch.channels_last) -> None:
        """What :meth:`train_step` uses: loss, model, EMA, optimiser, autocast (all on ``self.device``)."""
        cfg = self.cfg
        self.pixel_loss = PIXEL_LOSSES[cfg.loss]
        overrides = {"attention": cfg.attention} if cfg.attention else {}
        # Channels-last on every device: oneDNN's and cuDNN's native conv layout (on the AMX CPU, bf16:
        # 1.25x the steps/s alone, 1.56x with the written-out soft attention; `sr bench train --layouts`).
        self.model = SRNet(build_config(cfg.preset, cfg.scale, **overrides)).to(
            self.device, memory_format=memory_format
        )
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=cfg.weight_decay
        )
        self.net = self.model  # what the forward runs: the model, or its DDP wrapper
        self.autocast = dict(device_type=self.device.type, dtype=torch.bfloat16, enabled=bf16)
        self.step = 0
        self.disc = self.disc_opt = None
        if cfg.gan_weight > 0:
            self.disc = UNetDiscriminator(cfg.disc_width).to(self.device, memory_format=memory_format)
            self.disc_opt = torch.optim.AdamW(self.disc.parameters(), lr=cfg.disc_lr, betas=(0.9, 0.99),
                                              weight_decay=0.0)

    def train_step(self, lr: torch.Tensor, hr: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """One optimiser step on a batch on the device: forward (collecting the budget loss), pixel
        + ``budget_weight`` x budget loss, backward, clipping, AdamW, EMA; ``step`` counts it.

        Returns the pixel loss (detached, still on the device: reading it makes the host wait for
        the GPU) and the forward's aux dict (budget maps). The learning rate is the caller's to set.
        """
        cfg = self.cfg
        aux: dict = {}
        with torch.autocast(**self.autocast):
            out = self.net(lr, aux)
        pixel = self.pixel_loss(out.float(), hr)
        loss = pixel + cfg.budget_weight * aux.get("budget_loss", 0.0)
        if cfg.frequency_weight > 0:
            loss = loss + cfg.frequency_weight * frequency_loss(out, hr)
        if cfg.phase_weight > 0:
            phase = phase_loss(out, hr, cfg.scale)
            aux["phase"] = phase.detach()
            loss = loss + cfg.phase_weight * phase
        if self.disc is not None:
            loss = loss + self._generator_terms(lr, out, hr, aux)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.opt.step()
        if self.disc is not None:
            self._discriminator_step(out.detach(), hr, aux)
        self.step += 1
        ema_update(self.ema, self.model, min(cfg.ema_decay, (1 + self.step) / (10 + self.step)))
        return pixel.detach(), aux

    def _generator_terms(
        self, lr: torch.Tensor, out: torch.Tensor, hr: torch.Tensor, aux: dict
    ) -> torch.Tensor:
        """The perceptual fine-tune's generator loss: adversarial + feature matching + LDL artefacts.

        The discriminator is frozen for this backward (its own step follows); ``aux`` gets the terms'
        detached values for the log.
        """
        cfg = self.cfg
        self.disc.requires_grad_(False)
        with torch.autocast(**self.autocast):
            fake_logits, fake_feats = self.disc(out)
            with torch.no_grad():
                _, real_feats = self.disc(hr)
                ema_out = self.ema(lr)
        gan = adversarial_loss(fake_logits, real=True)
        feature = feature_matching_loss(fake_feats, real_feats)
        artefact = artefact_loss(out, hr, artefact_map(out.detach(), ema_out, hr))
        self.disc.requires_grad_(True)
        aux["gan"], aux["feature"], aux["artefact"] = gan.detach(), feature.detach(), artefact.detach()
        return cfg.gan_weight * gan + cfg.feature_weight * feature + cfg.artefact_weight * artefact

    def _discriminator_step(self, fake: torch.Tensor, hr: torch.Tensor, aux: dict) -> None:
        """One AdamW step of the discriminator: HR toward real, the (detached) output toward fake."""
        with torch.autocast(**self.autocast):
            real_logits, _ = self.disc(hr)
            fake_logits, _ = self.disc(fake)
        loss = adversarial_loss(real_logits, real=True) + adversarial_loss(fake_logits, real=False)
        self.disc_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.disc_opt.step()
        aux["disc"] = loss.detach()

    # -- bookkeeping -------------------------------------------------------------------------
    def log_line(self, record: dict) -> None:
        if not self.is_main:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / "log.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def _state(self) -> dict:
        return {
            "config": json.loads(self.cfg.to_json()),
            "model": self.model.state_dict(),
            "ema": self.ema.state_dict(),
            "opt": self.opt.state_dict(),
            "step": self.step,
            "best": self.best,
            "last_val": self.last_val,
            "elapsed": self.elapsed,
            "cpu_elapsed": self.cpu_elapsed,
            "lineage": self.lineage,
            "hardware": self.hardware,
            "torch_rng": torch.get_rng_state(),
            **({"disc": self.disc.state_dict(), "disc_opt": self.disc_opt.state_dict()}
               if self.disc is not None else {}),
        }

    def save(self, name: str = "last.pt") -> None:
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            atomic_save(self._state(), self.run_dir / name)

    def _export_state(self) -> dict:
        """What ``sr export`` needs of the EMA weights now: best.pt's and a snapshot's format."""
        return {"ema": self.ema.state_dict(), "config": json.loads(self.cfg.to_json()), "step": self.step,
                "best": self.best, "last_val": self.last_val, "elapsed": self.elapsed,
                "lineage": self.lineage, "hardware": self.hardware}

    def save_snapshot(self) -> None:
        """The EMA weights at this step as runs/NAME/snap-STEP.pt (exportable like best.pt)."""
        if self.is_main:
            atomic_save(self._export_state(), self.run_dir / f"snap-{self.step:06d}.pt")

    def _load(self, path: Path) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint to resume at {path}")
        # onto the CPU first: load_state_dict copies to the model's device, and the RNG state must
        # stay a CPU tensor (mapped onto CUDA, torch.set_rng_state refuses it with a TypeError)
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        self.model.load_state_dict(ckpt["model"])
        self.ema.load_state_dict(ckpt["ema"])
        self.opt.load_state_dict(ckpt["opt"])
        self.step, self.best, self.elapsed = ckpt["step"], ckpt["best"], ckpt.get("elapsed", 0.0)
        self.cpu_elapsed = ckpt.get("cpu_elapsed", 0.0)
        self.last_val = ckpt.get("last_val", {})
        self.lineage = ckpt.get("lineage", {})
        torch.set_rng_state(ckpt["torch_rng"])
        if self.disc is not None and "disc" in ckpt:  # a pixel-loss run resumed as a GAN starts D fresh
            self.disc.load_state_dict(ckpt["disc"])
            self.disc_opt.load_state_dict(ckpt["disc_opt"])

    def _on_signal(self, signum, frame) -> None:
        self.stop_requested = True

    # -- the loop ------------------------------------------------------------------------------
    def fit(self, stop_at: int | None = None) -> dict:
        """Train to ``cfg.steps`` (or pause at ``stop_at``, as an interrupted run would)."""
        cfg = self.cfg
        if self._cpu_budget_spent():
            if self.is_main:
                print(f"the CPU budget of {cfg.cpu_hours:g} h is spent ({self.cpu_elapsed / 3600:.3f} h at "
                      f"step {self.step}); raise --cpu-hours to train on", file=sys.stderr)
            return self.best
        if not cfg.train:  # TrainConfig has no default: no folder outside the checkout is assumed
            raise ValueError(
                "no training data: give --train DIR [DIR ...] (folders of HR images; "
                "or train = [...] in the --config file)"
            )
        loader = self._start_run()
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        bar = tqdm(total=cfg.steps, initial=self.step, disable=not (self.is_main and sys.stderr.isatty()))
        timed_out = False
        try:
            timed_out = self._train_steps(loader, bar, stop_at)
            self.save()
            if self.world > 1:
                # tearing gloo down while the other rank is still saving aborted a rank now and then
                # (SIGABRT, "terminate called without an active exception"); meet first, then destroy
                dist.barrier()
        finally:
            bar.close()
            for s, h in old_handlers.items():
                signal.signal(s, h)
            if self.world > 1:
                dist.destroy_process_group()
        if (self.stop_requested or timed_out) and self.is_main:
            self._say_stopped(timed_out)
        return self.best

    def _start_run(self) -> torch.utils.data.DataLoader:
        """The training data's loader from the current step; on the main process, the run folder
        with its config.json and the log's start line."""
        cfg = self.cfg
        pairs, data_info = training_pairs(cfg)
        dataset = PatchDataset(pairs, cfg.scale, cfg.patch)
        sampler = PatchSampler(
            dataset.lr_sizes, cfg.patch, cfg.batch, cfg.steps, cfg.seed, start=self.step, rank=self.rank,
            rgb_perm=cfg.rgb_perm,
        )
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=sampler, num_workers=cfg.workers, persistent_workers=cfg.workers > 0,
            pin_memory=self.device.type == "cuda",
        )
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.json").write_text(self.cfg.to_json())
            self.log_line({
                "event": "start", "step": self.step, **data_info,
                "params": count_params(self.model), "pixel_loss": cfg.loss, "device": str(self.device),
                "world": self.world, "threads": torch.get_num_threads(), "amp": self.autocast["enabled"],
                "host": platform.processor() or platform.machine(),
            })
        return loader

    def _train_steps(self, loader: torch.utils.data.DataLoader, bar: tqdm, stop_at: int | None) -> bool:
        """Run the steps ``loader`` yields, logging, validating and saving on their schedules, until
        the last step, ``stop_at``, a stop request or the time limit; whether the time ran out."""
        cfg = self.cfg
        window = _LogWindow(self.device)
        deadline = time.time() + cfg.time_limit * 60 if cfg.time_limit > 0 else None
        cpu_last = time.process_time()
        t_fetch = time.time()
        for lr_img, hr_img in loader:
            window.data_seconds += time.time() - t_fetch
            lr_now = lr_at(self.step, cfg, self.cpu_elapsed)
            for g in self.opt.param_groups:
                g["lr"] = lr_now
            lr_img, hr_img = lr_img.to(self.device, non_blocking=True), hr_img.to(self.device)
            pixel, aux = self.train_step(lr_img, hr_img)
            cpu_now = time.process_time()  # the process's CPU time: all threads, data loading included
            self.cpu_elapsed, cpu_last = self.cpu_elapsed + cpu_now - cpu_last, cpu_now
            window.add(pixel, aux)
            bar.update(1)
            if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                self._log_window(window, lr_now, bar)
            if self.step % cfg.val_every == 0 or self.step == cfg.steps:
                self._validate()
                window.t_last, cpu_last = time.time(), time.process_time()  # validation is not training
                window.data_seconds = 0.0
            if self.step % cfg.ckpt_every == 0:
                self.save()
            if cfg.snapshot_every and self.step % cfg.snapshot_every == 0:
                self.save_snapshot()
            if self._agree_to_stop(deadline):
                if self.last_val.get("step") != self.step:  # best.pt must not miss the last steps
                    self._validate()
                return True
            if self.stop_requested or self.step == stop_at:
                break
            t_fetch = time.time()
        return False

    def _log_window(self, window: _LogWindow, lr_now: float, bar: tqdm) -> None:
        """Log the steps since the last log line (their mean loss, budget, speed), then start anew."""
        loss_mean, budget_mean = window.loss_sum.item() / window.n, window.budget_sum.item() / window.n
        now = time.time()  # the .item() reads above wait for the GPU
        self.elapsed += now - window.t_last
        rec = {
            "step": self.step, "loss": loss_mean, "lr": lr_now, "budget_mean": budget_mean,
            "it_s": window.n / (now - window.t_last), "seconds": round(self.elapsed, 1),
            "cpu_seconds": round(self.cpu_elapsed, 1),
            # the share of the wall time spent waiting for data: must stay small (< ~15%)
            "data_share": round(window.data_seconds / max(1e-9, now - window.t_last), 4),
            **{k: v.item() / window.n for k, v in window.extra_sums.items()},
        }
        bar.set_postfix(loss=f"{rec['loss']:.4f}", it_s=f"{rec['it_s']:.2f}")
        self.log_line(rec)
        window.reset(now)

    def _say_stopped(self, timed_out: bool) -> None:
        why = ""
        if timed_out:
            why = (f"CPU budget of {self.cfg.cpu_hours:g} h reached: " if self._cpu_budget_spent()
                   else f"time limit of {self.cfg.time_limit:g} min reached: ")
        where = self.run_dir / "last.pt"
        print(f"{why}stopped at step {self.step}; checkpoint in {where}", file=sys.stderr)

    def _cpu_budget_spent(self) -> bool:
        return self.cfg.cpu_hours > 0 and self.cpu_elapsed >= self.cfg.cpu_hours * 3600

    def _agree_to_stop(self, deadline: float | None) -> bool:
        """Whether the time limit has passed or the CPU budget is spent; also settles
        ``stop_requested`` across DDP ranks.

        Ranks see the clock and signals at different steps; one leaving the loop alone would leave
        the others waiting in the next gradient all-reduce, so under DDP a stop on any rank is a stop
        on all (one tiny all-reduce per step, beside the gradients' own).
        """
        timed_out = (deadline is not None and time.time() >= deadline) or self._cpu_budget_spent()
        if self.world > 1:
            flags = torch.tensor([float(timed_out), float(self.stop_requested)], device=self.device)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            timed_out, self.stop_requested = bool(flags[0]), bool(flags[1])
        return timed_out

    def _validate(self) -> None:
        if not (self.is_main and self.cfg.val):
            return
        t = time.time()
        results = validate(self.ema, self.cfg, self.device)
        rec = {"step": self.step, "event": "val", "seconds": round(self.elapsed, 1),
               "val_seconds": round(time.time() - t, 1)}
        for k, v in results.items():
            rec[f"{k}_psnr"], rec[f"{k}_ssim"] = v["psnr"], v["ssim"]
        self.log_line(rec)
        self.last_val = {"step": self.step, "results": results}
        score = selection_score(results, self.cfg.best_on)
        # the held best is re-scored from its own results: a resume may change --best-on
        held = selection_score(self.best.get("results", {}), self.cfg.best_on)
        if held is None or score > held:
            self.best = {"step": self.step, "on": self.cfg.best_on, "results": results}
            atomic_save(self._export_state(), self.run_dir / "best.pt")
        if sys.stderr.isatty():
            tqdm.write(" ".join(f"{k}: {v['psnr']:.3f} dB / {v['ssim']:.4f}" for k, v in results.items()))
