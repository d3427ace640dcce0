"""The training loop: data, learning-rate schedule, logging, validation and checkpoint schedules, stops.

Runs on one CPU, one GPU, or K processes under ``torchrun`` (:mod:`sr.train.distributed`). Only rank 0
validates, logs and writes checkpoints. Each step is :meth:`sr.train.learner.Learner.train_step`, the
checkpoints :mod:`sr.train.checkpoints`' files. SIGINT/SIGTERM finish the current step, write a
checkpoint and exit; ``--resume`` continues exactly (model, EMA, optimiser, step, data order).
"""

from __future__ import annotations

import json
import math
import platform
import signal
import sys
import time

import torch
from tqdm import tqdm

from ..data import PatchDataset, PatchSampler, build_pairs, check_rescale, check_rgb_perm
from ..data.degrade import training_config
from ..data.pool import build_pool
from ..models import count_params
from . import distributed
from .checkpoints import Checkpoints, Progress
from .config import CROP_START_CHOICES, LOSS_CHOICES, TrainConfig
from .distributed import set_up_processes, training_hardware
from .init_weights import init_lineage, load_init
from .learner import Learner
from .validation import ranked_best, val_set_name, validate


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


def training_pairs(cfg: TrainConfig) -> tuple[list, dict]:
    """The (HR, LR) arrays PatchDataset samples, and what the start log records of them: whole images
    with bicubic LR, or with --degrade a seeded pool of degraded patch pairs (each cropped whole)."""
    if cfg.degrade:
        pairs, info = build_pool(
            cfg.train, cfg.scale, cfg.patch, cfg.pool, cfg.seed, training_config(cfg.degrade), cfg.cache,
            any_pixel=cfg.crop_start == "any",
        )
        return pairs, {"images": len(pairs), "skipped_small": 0, "degrade": cfg.degrade, **info}
    pairs, skipped = build_pairs(cfg.train, cfg.scale, cfg.patch, cfg.cache, cfg.rescale)
    return pairs, {"images": len(pairs), "skipped_small": skipped}


def check_config(cfg: TrainConfig) -> None:
    """ValueError for a configuration that cannot train, before any data is read or process set up."""
    if not 0 <= cfg.cycle_start < cfg.steps:
        raise ValueError(f"--cycle-start {cfg.cycle_start} must lie in [0, --steps {cfg.steps})")
    check_rescale(cfg.rescale)
    check_rgb_perm(cfg.rgb_perm)
    for name in ("gan_weight", "phase_weight", "flat_weight", "snapshot_every"):
        if getattr(cfg, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(cfg, name)}")
    if cfg.gan_weight > 0 and (cfg.patch * cfg.scale) % 8:
        raise ValueError(f"--gan-weight needs an HR patch side (--patch x --scale = "
                         f"{cfg.patch * cfg.scale}) that is a multiple of 8 (the discriminator's "
                         "three stride-2 steps)")
    if cfg.loss not in LOSS_CHOICES:
        raise ValueError(f"--loss {cfg.loss!r} is not one of: {', '.join(LOSS_CHOICES)}")
    if cfg.crop_start not in CROP_START_CHOICES:
        raise ValueError(f"--crop-start {cfg.crop_start!r} is not one of: {', '.join(CROP_START_CHOICES)}")
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
        for key in ("gan", "feature", "artefact", "phase", "flat", "disc"):
            if key in aux:
                self.extra_sums[key] = self.extra_sums.get(key, self.zero) + aux[key].float()
        maps = aux.get("budget_maps")
        if maps:
            self.budget_sum += torch.stack([m.detach().float().mean() for m in maps]).mean()
        self.n += 1


class Trainer:
    """One training run of ``cfg``: a fresh start (or from ``--init`` weights), or with ``resume`` its
    last.pt continued; :meth:`fit` trains it."""

    def __init__(self, cfg: TrainConfig, resume: bool = False) -> None:
        check_config(cfg)
        self.cfg = cfg
        self.processes = set_up_processes(cfg)
        self.is_main = self.processes.is_main
        self.run_dir = cfg.run_dir
        self.stop_requested = False
        self.learner = Learner(cfg, self.processes.device)
        self.progress = Progress()
        self.checkpoints = Checkpoints(
            cfg, self.learner, self.progress, training_hardware(self.processes.device, self.processes.world),
            self.is_main,
        )
        self._start_from(resume)
        self.learner.net = distributed.wrap(self.learner.model, self.processes)

    @property
    def step(self) -> int:
        """Optimiser steps taken, over all sessions of the run."""
        return self.learner.step

    @property
    def model(self) -> torch.nn.Module:
        return self.learner.model

    @property
    def ema(self) -> torch.nn.Module:
        """The EMA of the weights: what validation scores and the exports ship."""
        return self.learner.ema

    def _start_from(self, resume: bool) -> None:
        """Resume from last.pt, refuse a folder that holds another run, or start from --init."""
        cfg = self.cfg
        if resume:
            self.checkpoints.resume()
        elif (self.run_dir / "last.pt").exists() or (self.run_dir / "log.jsonl").exists():
            # never mix two runs' checkpoints and logs in one folder
            raise ValueError(
                f"{self.run_dir} already holds a training run; continue it with --resume {self.run_dir} "
                "or choose another --name/--out"
            )
        elif cfg.init:
            missing = load_init(self.model, cfg.init, cfg.init_layers)
            self.ema.load_state_dict(self.model.state_dict())
            lineage = init_lineage(cfg.init, self.model, cfg.init_layers)
            self.progress.lineage = lineage
            self.log_line({"event": "init", "from": cfg.init, "fresh_tensors": missing, "lineage": lineage})

    def log_line(self, record: dict) -> None:
        if not self.is_main:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / "log.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def _on_signal(self, signum, frame) -> None:
        self.stop_requested = True

    def fit(self, stop_at: int | None = None) -> dict:
        """Train to ``cfg.steps`` (or pause at ``stop_at``, as an interrupted run would); the best
        validation's record ({} when nothing was validated)."""
        cfg = self.cfg
        if self._cpu_budget_spent():
            if self.is_main:
                spent = self.progress.cpu_elapsed / 3600
                print(f"the CPU budget of {cfg.cpu_hours:g} h is spent ({spent:.3f} h at step {self.step}); "
                      "raise --cpu-hours to train on", file=sys.stderr)
            return self.progress.best
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
            self.checkpoints.save()
            distributed.meet(self.processes)
        finally:
            bar.close()
            for s, h in old_handlers.items():
                signal.signal(s, h)
            distributed.leave(self.processes)
        if (self.stop_requested or timed_out) and self.is_main:
            self._say_stopped(timed_out)
        return self.progress.best

    def _start_run(self) -> torch.utils.data.DataLoader:
        """The training data's loader from the current step; on the main process, the run folder
        with its config.json and the log's start line."""
        cfg, device = self.cfg, self.processes.device
        pairs, data_info = training_pairs(cfg)
        dataset = PatchDataset(pairs, cfg.scale, cfg.patch)
        sampler = PatchSampler(
            dataset.lr_sizes, cfg.patch, cfg.batch, cfg.steps, cfg.seed, start=self.step,
            rank=self.processes.rank, rgb_perm=cfg.rgb_perm,
        )
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=sampler, num_workers=cfg.workers, persistent_workers=cfg.workers > 0,
            pin_memory=device.type == "cuda",
        )
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.json").write_text(self.cfg.to_json())
            self.log_line({
                "event": "start", "step": self.step, **data_info,
                "params": count_params(self.model), "pixel_loss": cfg.loss, "device": str(device),
                "world": self.processes.world, "threads": torch.get_num_threads(),
                "amp": self.learner.autocast["enabled"], "host": platform.processor() or platform.machine(),
            })
        return loader

    def _train_steps(self, loader: torch.utils.data.DataLoader, bar: tqdm, stop_at: int | None) -> bool:
        """Run the steps ``loader`` yields, logging, validating and saving on their schedules, until
        the last step, ``stop_at``, a stop request or the time limit; whether the time ran out."""
        cfg, device, progress = self.cfg, self.processes.device, self.progress
        window = _LogWindow(device)
        deadline = time.time() + cfg.time_limit * 60 if cfg.time_limit > 0 else None
        cpu_last = time.process_time()
        t_fetch = time.time()
        for lr_img, hr_img in loader:
            window.data_seconds += time.time() - t_fetch
            lr_now = lr_at(self.step, cfg, progress.cpu_elapsed)
            for g in self.learner.opt.param_groups:
                g["lr"] = lr_now
            lr_img, hr_img = lr_img.to(device, non_blocking=True), hr_img.to(device)
            pixel, aux = self.learner.train_step(lr_img, hr_img)
            cpu_now = time.process_time()  # the process's CPU time: all threads, data loading included
            progress.cpu_elapsed, cpu_last = progress.cpu_elapsed + cpu_now - cpu_last, cpu_now
            window.add(pixel, aux)
            bar.update(1)
            if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                self._log_window(window, lr_now, bar)
            if self.step % cfg.val_every == 0 or self.step == cfg.steps:
                self._validate()
                window.t_last, cpu_last = time.time(), time.process_time()  # validation is not training
                window.data_seconds = 0.0
            if self.step % cfg.ckpt_every == 0:
                self.checkpoints.save()
            if cfg.snapshot_every and self.step % cfg.snapshot_every == 0:
                self.checkpoints.save_snapshot()
            if self._agree_to_stop(deadline):
                if progress.last_val.get("step") != self.step:  # best.pt must not miss the last steps
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
        progress = self.progress
        progress.elapsed += now - window.t_last
        rec = {
            "step": self.step, "loss": loss_mean, "lr": lr_now, "budget_mean": budget_mean,
            "it_s": window.n / (now - window.t_last), "seconds": round(progress.elapsed, 1),
            "cpu_seconds": round(progress.cpu_elapsed, 1),
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
        return self.cfg.cpu_hours > 0 and self.progress.cpu_elapsed >= self.cfg.cpu_hours * 3600

    def _agree_to_stop(self, deadline: float | None) -> bool:
        """Whether the time limit has passed or the CPU budget is spent, on any rank; also settles
        ``stop_requested`` across DDP ranks (:func:`sr.train.distributed.agree_to_stop`)."""
        timed_out = (deadline is not None and time.time() >= deadline) or self._cpu_budget_spent()
        timed_out, self.stop_requested = distributed.agree_to_stop(
            self.processes, timed_out, self.stop_requested
        )
        return timed_out

    def _validate(self) -> None:
        """Validate the EMA weights (main process, with --val), log it, and keep best.pt if it ranks best."""
        if not (self.is_main and self.cfg.val):
            return
        t = time.time()
        results = validate(self.ema, self.cfg, self.processes.device)
        rec = {"step": self.step, "event": "val", "seconds": round(self.progress.elapsed, 1),
               "val_seconds": round(time.time() - t, 1)}
        for k, v in results.items():
            rec[f"{k}_psnr"], rec[f"{k}_ssim"] = v["psnr"], v["ssim"]
        self.log_line(rec)
        self.progress.last_val = {"step": self.step, "results": results}
        best = ranked_best(self.progress.best, results, self.cfg.best_on, self.step)
        if best is not None:
            self.progress.best = best
            self.checkpoints.save_best()
        if sys.stderr.isatty():
            tqdm.write(" ".join(f"{k}: {v['psnr']:.3f} dB / {v['ssim']:.4f}" for k, v in results.items()))
