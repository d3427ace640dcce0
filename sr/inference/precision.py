"""Which floating-point type the network runs in: ``--precision auto|fp32|bf16``.

On a GPU ``auto`` keeps the engine's long-standing choice (bf16 on CUDA where supported, else fp16;
fp16 on MPS). On a CPU ``auto`` runs bf16 only where both hold: the CPU multiplies bf16 natively
(:func:`~sr.inference.devices.cpu_has_native_bf16`: AMX), and the model's measured quality cost in
bf16 is on record below and within :data:`MAX_BF16_COST_DB`; everything else runs fp32. ``fp32``
and ``bf16`` force that type on any device.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .. import weights as sr_weights
from ..request import PRECISIONS
from .devices import cpu_has_native_bf16, pick_dtype

if TYPE_CHECKING:
    from ..descriptor import ModelDescriptor

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# The most valid Y-PSNR a model may lose in bf16 for auto to pick it on a CPU (issue 43).
MAX_BF16_COST_DB = 0.01
# fp32 minus bf16 Y-PSNR (dB) per shipped weights file: the worst of valid (33 held-out images),
# Set5 and Set14, from (D = ../shared/datasets)
#   sr eval --hr D/valid D/benchmark/Set5 D/benchmark/Set14 --scale S --model NAME --device cpu -q \
#       --precision fp32|bf16
# (docs/inference.md#precision-bf16-on-cpus-with-amx has the per-set figures). A model not listed here
# (your own weights, even under a shipped name) runs fp32 under auto: its cost is unknown.
BF16_PSNR_COST_DB: dict[str, float] = {
    "asa-base-x2": 0.0079, "asa-base-x3": 0.0035, "asa-base-x4": 0.0016,
    "asa-deep-x2": 0.0077, "asa-deep-x3": 0.0043, "asa-deep-x4": 0.0046,
    "photo-x2": 0.0054, "photo-x3": 0.0063, "photo-x4": 0.0037,
}


class PrecisionError(ValueError):
    """An unknown precision name, or one the device cannot run."""


def parse_precision(text: str) -> str:
    """'auto', 'fp32' or 'bf16' (case and blanks ignored); anything else is a PrecisionError."""
    name = str(text).strip().lower()
    if name not in PRECISIONS:
        raise PrecisionError(f"precision must be one of {', '.join(PRECISIONS)}, got {text!r}")
    return name


def record_name(desc: ModelDescriptor) -> str | None:
    """The name a weights file has in :data:`BF16_PSNR_COST_DB`: the record measured the package's
    own files, so a file elsewhere (your own weights, whatever its name) has none."""
    if desc.path is None:
        return None
    shipped = Path(desc.path).resolve().parent == Path(sr_weights.WEIGHTS_DIR).resolve()
    return desc.name if shipped else None


def bf16_cost_ok(models: Iterable[str | None]) -> bool:
    """Whether every named model has a recorded bf16 cost within :data:`MAX_BF16_COST_DB` (a None
    name, :func:`record_name`'s answer for weights off the record, has none)."""
    names = list(models)
    return bool(names) and all(
        name in BF16_PSNR_COST_DB and BF16_PSNR_COST_DB[name] <= MAX_BF16_COST_DB for name in names
    )


def resolve_dtype(precision: str, device: torch.device, models: Iterable[str | None] = ()) -> torch.dtype:
    """The dtype to run ``models`` in: their :func:`record_name` (e.g. 'asa-base-x2'; a blend names
    both files)."""
    precision = parse_precision(precision)
    if precision in DTYPES:
        if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise PrecisionError("this CUDA GPU has no bf16 support; use --precision auto or fp32")
        return DTYPES[precision]
    if device.type != "cpu":
        return pick_dtype(device)
    return torch.bfloat16 if cpu_has_native_bf16() and bf16_cost_ok(models) else torch.float32


def precision_name(dtype: torch.dtype) -> str:
    """'fp32', 'bf16' or 'fp16': how benchmarks and logs name a dtype."""
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))
