"""Whether bf16 keeps an outside model's output: checked once per model file, on first use.

sr's own models run bf16 under ``--precision auto`` only with a measured quality cost on record
(:data:`sr.inference.precision.BF16_PSNR_COST_DB`). For a file nobody measured, auto runs the model
on a fixed synthetic image in fp32 and in bf16 and keeps bf16 only when the two outputs are at least
:data:`MIN_AGREEMENT_DB` apart (PSNR of bf16 against fp32). The answer is cached per file content,
torch version and CPU kind in ``$SR_CACHE_DIR`` (default ``~/.cache/sr``), so a file is checked once
per machine.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from ..cache import cache_dir, file_key
from ..cpu import cpu_bf16_kind
from ..descriptor import ModelDescriptor
from ..io import atomic_write

MIN_AGREEMENT_DB = 50.0
CHECK_SIZE = 48  # the check image's side: every architecture's receptive field sees edges and texture
CACHE_FILE = "bf16-checks.json"
_lock = threading.Lock()
_hashes: dict[tuple[str, int, int], str] = {}


def check_image(size: int = CHECK_SIZE) -> torch.Tensor:
    """(1, 3, size, size) in [0, 1]: gradients, a hard edge, a sine grating and seeded noise, the
    same on every machine."""
    g = torch.Generator().manual_seed(0)
    ys, xs = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    r = 0.2 + 0.6 * xs
    gr = 0.5 + 0.4 * torch.sin(xs * 40) * torch.cos(ys * 25)
    b = (xs + ys > 1).float() * 0.7 + 0.1
    img = torch.stack([r, gr, b])[None] + 0.05 * torch.randn(1, 3, size, size, generator=g)
    return img.clamp(0, 1)


def _file_hash(path: Path) -> str:
    key = file_key(path)
    if key not in _hashes:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _hashes[key] = h.hexdigest()
    return _hashes[key]


def _cache_key(path: Path) -> str:
    return f"{_file_hash(path)}|torch {torch.__version__}|{cpu_bf16_kind()}"


def measure_agreement(desc: ModelDescriptor) -> float:
    """PSNR (dB) of the model's bf16 output against its fp32 output on :func:`check_image`, on the
    CPU; inf when they are equal."""
    from .describe import load_network

    net = load_network(desc)
    x = check_image()
    with torch.inference_mode():
        ref = net(x).float()
        low = net.to(torch.bfloat16)(x.to(torch.bfloat16)).float()
    mse = float(torch.mean((ref.clamp(0, 1) - low.clamp(0, 1)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


def bf16_agreement(desc: ModelDescriptor) -> float:
    """:func:`measure_agreement`, measured once per file content, torch version and CPU kind."""
    return measured_once(desc, CACHE_FILE, measure_agreement)


def measured_once(desc: ModelDescriptor, cache_file: str,
                  measure: Callable[[ModelDescriptor], float]) -> float:
    """``measure(desc)``, cached in ``cache_file`` of :func:`cache_dir` per file content, torch
    version and CPU kind (so a model file is measured once per machine)."""
    if desc.path is None:
        return measure(desc)
    path = Path(desc.path)
    key = _cache_key(path)
    file = cache_dir() / cache_file
    with _lock:
        try:
            cached = json.loads(file.read_text())
        except (OSError, ValueError):
            cached = {}
        if not isinstance(cached, dict):
            cached = {}
        if isinstance(cached.get(key), (int, float)):
            return float(cached[key])
        db = measure(desc)
        cached[key] = db if math.isfinite(db) else 999.0
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(file, json.dumps(cached, indent=1, sort_keys=True).encode())
        except OSError:
            pass  # a read-only home: the check runs again next time, the answer is the same
        return db
