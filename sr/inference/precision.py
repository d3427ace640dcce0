"""Which floating-point type the network runs in: ``--precision auto|fp32|bf16``.

On a GPU ``auto`` keeps the engine's long-standing choice (bf16 on CUDA where supported, else fp16;
fp16 on MPS). On a CPU ``auto`` runs bf16 only where both hold: the CPU multiplies bf16 natively
(:func:`~sr.inference.devices.cpu_has_native_bf16`: AMX), and the model's measured quality cost in
bf16 is on record below and within :data:`MAX_BF16_COST_DB`; everything else runs fp32. ``fp32``
and ``bf16`` force that type on any device.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .devices import cpu_has_native_bf16, pick_dtype

PRECISIONS = ("auto", "fp32", "bf16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# The most valid Y-PSNR a model may lose in bf16 for auto to pick it on a CPU (issue 43).
MAX_BF16_COST_DB = 0.01
# fp32 minus bf16 Y-PSNR (dB) on the 33 held-out valid images, per shipped weights file, from
#   sr eval --hr ../shared/datasets/valid --scale S --model NAME --precision fp32|bf16 -q
# (docs/benchmarks.md#precision). A model not listed here (your own weights, a retrained file under a
# shipped name that has not been measured again) runs fp32 under auto: its cost is unknown.
BF16_PSNR_COST_DB: dict[str, float] = {}


class PrecisionError(ValueError):
    """An unknown precision name, or one the device cannot run."""


def parse_precision(text: str) -> str:
    """'auto', 'fp32' or 'bf16' (case and blanks ignored); anything else is a PrecisionError."""
    name = str(text).strip().lower()
    if name not in PRECISIONS:
        raise PrecisionError(f"precision must be one of {', '.join(PRECISIONS)}, got {text!r}")
    return name


def bf16_cost_ok(models: Iterable[str]) -> bool:
    """Whether every named model has a recorded bf16 cost within :data:`MAX_BF16_COST_DB`."""
    names = list(models)
    return bool(names) and all(
        name in BF16_PSNR_COST_DB and BF16_PSNR_COST_DB[name] <= MAX_BF16_COST_DB for name in names
    )


def resolve_dtype(precision: str, device: torch.device, models: Iterable[str] = ()) -> torch.dtype:
    """The dtype to run ``models`` (weights names, e.g. 'asa-base-x2'; a blend names both files) in."""
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
