"""A run's checkpoints in runs/NAME: last.pt (to resume), best.pt and snap-STEP.pt (to export).

last.pt holds everything ``--resume`` needs to continue exactly: the learner (model, EMA, optimiser,
step, a GAN run's discriminator), the run's progress and the torch RNG. best.pt and the snapshots
hold the EMA weights with what ``sr export`` writes into the metadata. Every write is atomic, and
only the main process writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..io import atomic_write
from .config import TrainConfig
from .learner import Learner


def atomic_save(obj, path: Path) -> None:
    atomic_write(path, lambda f: torch.save(obj, f))


@dataclass
class Progress:
    """What a run has done over all its sessions, beside the weights (checkpointed, exported)."""

    best: dict = field(default_factory=dict)  # {"step", "on", "results"} of best.pt's validation
    # the latest validation {"step", "results"}: an export of last.pt cites it
    last_val: dict = field(default_factory=dict)
    elapsed: float = 0.0  # training seconds over all sessions (for the model card)
    cpu_elapsed: float = 0.0  # CPU seconds of the training steps over all sessions (--cpu-hours)
    lineage: dict = field(default_factory=dict)  # the --init weights' own training (init_lineage)


class Checkpoints:
    """Writes ``learner`` and ``progress`` of the run ``cfg`` to its folder, and resumes them from it.

    ``hardware`` is this session's training machine (``sr export`` records it).
    """

    def __init__(
        self, cfg: TrainConfig, learner: Learner, progress: Progress, hardware: str, is_main: bool
    ) -> None:
        self.cfg, self.learner, self.progress = cfg, learner, progress
        self.hardware, self.is_main = hardware, is_main
        self.run_dir = cfg.run_dir

    def _state(self) -> dict:
        p = self.progress
        return {
            "config": json.loads(self.cfg.to_json()), **self.learner.state_dict(),
            "best": p.best, "last_val": p.last_val, "elapsed": p.elapsed, "cpu_elapsed": p.cpu_elapsed,
            "lineage": p.lineage, "hardware": self.hardware, "torch_rng": torch.get_rng_state(),
        }

    def _export_state(self) -> dict:
        """What ``sr export`` needs of the EMA weights now: best.pt's and a snapshot's format."""
        p = self.progress
        return {"ema": self.learner.ema.state_dict(), "config": json.loads(self.cfg.to_json()),
                "step": self.learner.step, "best": p.best, "last_val": p.last_val, "elapsed": p.elapsed,
                "lineage": p.lineage, "hardware": self.hardware}

    def save(self, name: str = "last.pt") -> None:
        """Everything a resume needs, as runs/NAME/``name``."""
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            atomic_save(self._state(), self.run_dir / name)

    def save_best(self) -> None:
        """The EMA weights now as runs/NAME/best.pt."""
        if self.is_main:
            atomic_save(self._export_state(), self.run_dir / "best.pt")

    def save_snapshot(self) -> None:
        """The EMA weights at this step as runs/NAME/snap-STEP.pt (exportable like best.pt)."""
        if self.is_main:
            atomic_save(self._export_state(), self.run_dir / f"snap-{self.learner.step:06d}.pt")

    def resume(self) -> None:
        """Learner, progress and RNG back to runs/NAME/last.pt (checkpoints from before a progress
        field was recorded start it at zero)."""
        path = self.run_dir / "last.pt"
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint to resume at {path}")
        # onto the CPU first: load_state_dict copies to the model's device, and the RNG state must
        # stay a CPU tensor (mapped onto CUDA, torch.set_rng_state refuses it with a TypeError)
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        self.learner.load_state_dict(ckpt)
        p = self.progress
        p.best, p.last_val, p.lineage = ckpt["best"], ckpt.get("last_val", {}), ckpt.get("lineage", {})
        p.elapsed, p.cpu_elapsed = ckpt.get("elapsed", 0.0), ckpt.get("cpu_elapsed", 0.0)
        torch.set_rng_state(ckpt["torch_rng"])
