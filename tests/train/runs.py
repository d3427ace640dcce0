"""What the training tests share: a tiny run's data and config, its log, and `sr export` of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from sr.train.config import load_config

REPO = Path(__file__).resolve().parents[2]


def textures(folder: Path, n: int = 4, size: int = 72, seed: int = 0) -> Path:
    """Smooth random colour textures: learnable detail without any dataset."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    yy, xx = np.mgrid[0:size, 0:size] / size
    for i in range(n):
        img = np.zeros((size, size, 3))
        for c in range(3):
            for _ in range(4):
                fx, fy, ph = rng.uniform(1, 9, 2).tolist() + [rng.uniform(0, 6)]
                img[:, :, c] += np.sin(2 * np.pi * (fx * xx + fy * yy) + ph)
        img = (img - img.min()) / (img.max() - img.min()) * 255
        Image.fromarray(img.astype(np.uint8)).save(folder / f"t{i}.png")
    return folder


def tiny_config(tmp_path: Path, **kw):
    data = textures(tmp_path / "train")
    val = textures(tmp_path / "val", n=2, size=48, seed=1)
    base = dict(
        name="tiny", preset="asa-small", scale=2, train=[str(data)], val=[str(val)], patch=16, batch=4,
        steps=40, lr=2e-3, warmup=5, val_every=20, ckpt_every=10, log_every=5, out=str(tmp_path / "runs"),
        cache=str(tmp_path / "cache"), threads=1, device="cpu",  # CUDA runs have their own tests
    )
    base.update(kw)
    return load_config(None, **base)


def read_log(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


def export_checkpoint(ckpt: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sr", "export", str(ckpt), "-o", str(out)],
                          cwd=REPO, capture_output=True, text=True)
