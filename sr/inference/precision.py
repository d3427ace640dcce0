"""Which floating-point type the network runs in: ``--precision auto|fp32|bf16``.

On a GPU ``auto`` keeps the engine's long-standing choice (bf16 on CUDA where supported, else fp16;
fp16 on MPS). On a CPU ``auto`` runs bf16 only where all hold: the CPU multiplies bf16 in hardware
(:func:`~sr.cpu.cpu_bf16_kind`: AMX, or AVX-512 BF16), the input is at least as large
as bf16 was measured faster from on that kind of CPU (:data:`BF16_FROM_PIXELS`), and the model's
measured quality cost in bf16 is on record below and within :data:`MAX_BF16_COST_DB`; everything
else runs fp32. ``fp32`` and ``bf16`` force that type on any device. :func:`choose_dtype` also says
why, for ``sr info`` and ``sr upscale -v``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .. import weights as sr_weights
from ..cpu import cpu_bf16_kind, cpu_model, cpu_runs_bf16
from ..request import PRECISIONS
from .devices import pick_dtype

if TYPE_CHECKING:
    from ..descriptor import ModelDescriptor

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# The most valid Y-PSNR a model may lose in bf16 for auto to pick it on a CPU: auto is the default, so
# its speed-up must leave the scores as fp32 gives them; a model whose measured loss is larger stays
# fp32 (docs/inference.md, "Which models").
MAX_BF16_COST_DB = 0.01
# fp32 minus bf16 Y-PSNR (dB) per shipped weights file on valid (the 33 held-out images: choices are
# made there; Set5 and Set14 are the test, reported beside it in docs/inference.md), from
# (D = ../shared/datasets)
#   sr eval --hr D/valid --scale S --model NAME --device cpu -q --precision fp32|bf16
# or ``python -m research.bf16_cost --hr D/valid --scale S FILE``. asa-base, asa-deep and photo were
# measured on the AMX Xeon, photo-natural on the AMD EPYC Zen 4 (AVX512_BF16, no AMX): both round the
# same activations to bf16, with different oneDNN kernels (photo-x2 costs 0.0014 dB on both). A
# negative cost is bf16 scoring higher (rounding noise). A model not listed here (your own weights,
# even under a shipped name) runs fp32 under auto: its cost is unknown.
BF16_PSNR_COST_DB: dict[str, float] = {
    "asa-base-x2": 0.0054, "asa-base-x3": 0.0015, "asa-base-x4": -0.0002,
    "asa-deep-x2": 0.0060, "asa-deep-x3": 0.0016, "asa-deep-x4": 0.0002,
    "photo-x2": 0.0014, "photo-x3": 0.0033, "photo-x4": 0.0018,
    "photo-natural-x2": -0.0025, "photo-natural-x3": -0.0039, "photo-natural-x4": -0.0007,
}
# A blend (--denoise, --look: every tensor (1 - t) * a + t * b, for any t) rounds its own activations,
# so its cost is bounded by neither its files' largest nor their sum (both rules were tried: on valid,
# asa-base-x2 + photo-x2 at t = 0.75 costs 0.0118 dB against its files' 0.0054 and 0.0014). Each blend
# auto may run is measured instead, on valid on the AMD EPYC Zen 4, at t = 0.25, 0.5 and 0.75
# (``python -m research.bf16_cost A+B@0.25,0.5,0.75``) and --denoise with --look at D = L = 0.5
# (``A+B+C@0.5:0.5``); its cost is the largest measured over its family: for --denoise with --look,
# whose edges are the --denoise blend (L = 0) and the --look blend (D = 1), those two's points too.
# Key = the files, in any order.
BF16_BLEND_MEASURED_DB: dict[frozenset[str], tuple[float, ...]] = {
    frozenset(names): costs for names, costs in (
        (("photo-x2", "photo-natural-x2"), (0.0022, 0.0010, 0.0000)),
        (("asa-base-x2", "photo-x2"), (0.0086, 0.0093, 0.0118)),
        (("asa-base-x2", "photo-x2", "photo-natural-x2"), (0.0075,)),
        (("photo-x3", "photo-natural-x3"), (0.0012, 0.0003, -0.0009)),
        (("asa-base-x3", "photo-x3"), (0.0020, -0.0001, 0.0011)),
        (("asa-base-x3", "photo-x3", "photo-natural-x3"), (0.0007,)),
        (("photo-x4", "photo-natural-x4"), (0.0017, 0.0002, -0.0041)),
        (("asa-base-x4", "photo-x4"), (0.0017, 0.0020, 0.0017)),
        (("asa-base-x4", "photo-x4", "photo-natural-x4"), (0.0015,)),
    )
}


def blend_cost(names: frozenset[str]) -> float | None:
    """A blend's bf16 cost (dB) from :data:`BF16_BLEND_MEASURED_DB`: the largest measured over its
    family (a three-file blend's two-file edges included); None when the blend was never measured."""
    if names not in BF16_BLEND_MEASURED_DB:
        return None
    costs = list(BF16_BLEND_MEASURED_DB[names])
    if len(names) > 2:
        for edge in itertools.combinations(sorted(names), 2):
            costs += BF16_BLEND_MEASURED_DB.get(frozenset(edge), ())
    return max(costs)


# From which input size (pixels of one model pass's input) auto runs bf16, per cpu_bf16_kind; None =
# never. AMX: bf16 was faster at every size measured (12 valid images at x2 and x4 through `sr upscale`:
# 2.72x / 2.40x fp32, docs/inference.md). AVX-512 BF16 without AMX (AMD EPYC Zen 5): 1.9-2.3x on an
# 800 px JPEG and 2.03x on a 1600 px image, but 0.76x on the 192 px samples, where the fixed cost of
# bf16's weight reorders outweighs its faster convolutions; 512 x 512 sits between the measured
# points. Emulated (AVX2 only, e.g. AMD EPYC Zen 3): bf16 is slower than fp32 at every size.
BF16_FROM_PIXELS: dict[str, int | None] = {"amx": 0, "avx512_bf16": 512 * 512, "emulated": None}
# What the speed-up was measured as, for the reason auto gives.
BF16_MEASURED = {
    "amx": "AMX-BF16, measured 2.4-2.7x fp32 end to end",
    "avx512_bf16": "AVX512_BF16, measured 1.9-2.3x fp32 from 800 px",
    "emulated": "no AMX or AVX512_BF16 on this CPU (bf16 is slower than fp32 there, or cannot run)",
}


# CPU models measured apart from their kind: (kind, vendor, family) -> (start, what was measured).
# AMD Zen 4 (family 25 with AVX-512 BF16; Zen 3, the same family, has none and is 'emulated'), the
# 2-core EPYC of 2026-12-07, one thread, CPU time, medians of 3 interleaved warm runs through
# Upscaler.upscale: photo-x2 1.74x / 1.88x / 1.92x / 1.93x / 1.73x / 1.92x at 128 / 192 / 256 / 384 /
# 512 / 800 px, photo-x4 1.76-1.96x at 96-384 px, asa-base-x2 1.82-2.03x at 128-384 px; whole
# `sr upscale` processes on valid/ 1.65x (x2) and 1.59x (x4) fp32's CPU time, on the 192 px samples
# 1.23x wall (torch's import included). Unlike the Zen 5 figures above, bf16 is faster at every size.
BF16_BY_CPU_MODEL: dict[tuple[str, str, int], tuple[int | None, str]] = {
    ("avx512_bf16", "AuthenticAMD", 25): (0, "AVX512_BF16 (AMD Zen 4), measured 1.7-2.0x fp32 at 96-800 px"),
}


def bf16_speed() -> tuple[int | None, str]:
    """(smallest pass input in pixels from which auto runs bf16 on this CPU, None = never; what was
    measured there): this CPU model's own entry in :data:`BF16_BY_CPU_MODEL`, else its kind's."""
    kind = cpu_bf16_kind()
    model = cpu_model()
    if model is not None and (kind, *model) in BF16_BY_CPU_MODEL:
        return BF16_BY_CPU_MODEL[(kind, *model)]
    return BF16_FROM_PIXELS[kind], BF16_MEASURED[kind]


def bf16_from_pixels() -> int | None:
    """The smallest pass input (pixels) from which auto runs bf16 on this CPU; None = never."""
    return bf16_speed()[0]


class PrecisionError(ValueError):
    """An unknown precision name, or one the device cannot run."""


def parse_precision(text: str) -> str:
    """'auto', 'fp32' or 'bf16' (case and blanks ignored); anything else is a PrecisionError."""
    name = str(text).strip().lower()
    if name not in PRECISIONS:
        raise PrecisionError(f"precision must be one of {', '.join(PRECISIONS)}, got {text!r}")
    return name


def record_name(desc: ModelDescriptor, shipped_dir: str | Path | None = None) -> str | None:
    """The name a weights file has in :data:`BF16_PSNR_COST_DB`: the record measured the package's
    own files (in ``shipped_dir``, default :data:`sr.weights.WEIGHTS_DIR`), so a file elsewhere
    (your own weights, whatever its name) has none."""
    if desc.path is None:
        return None
    folder = sr_weights.WEIGHTS_DIR if shipped_dir is None else shipped_dir
    shipped = Path(desc.path).resolve().parent == Path(folder).resolve()
    return desc.name if shipped else None


def bf16_cost(models: Iterable[str | None]) -> float | None:
    """The bf16 cost (dB) of running ``models`` as one network: one file's record, or a blend's
    (:func:`blend_cost`, its files in any order); None when there is no record (a None name,
    :func:`record_name`'s answer for weights off the record, or a blend nobody measured)."""
    names = list(dict.fromkeys(models))
    # a blend's record holds only while each of its files is the one measured (on the record)
    if not names or any(name not in BF16_PSNR_COST_DB for name in names):
        return None
    if len(names) == 1:
        return BF16_PSNR_COST_DB[names[0]]  # type: ignore[index]
    return blend_cost(frozenset(names))  # type: ignore[arg-type]


def bf16_cost_ok(models: Iterable[str | None]) -> bool:
    """Whether the named models, as one network, have a bf16 cost (:func:`bf16_cost`) within
    :data:`MAX_BF16_COST_DB`."""
    cost = bf16_cost(models)
    return cost is not None and cost <= MAX_BF16_COST_DB


def choose_dtype(
    precision: str, device: torch.device, models: Iterable[str | None] = (), pixels: int | None = None,
) -> tuple[torch.dtype, str]:
    """(dtype, why) to run ``models`` in: their :func:`record_name` (e.g. 'asa-base-x2'; a blend names
    both files), on an input of ``pixels`` (one pass's; None = a large one). ``why`` is a short
    reason such as 'bf16: AVX512_BF16, measured 1.9-2.3x fp32 from 800 px'."""
    precision = parse_precision(precision)
    if precision in DTYPES:
        if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise PrecisionError("this CUDA GPU has no bf16 support; use --precision auto or fp32")
        if precision == "bf16" and device.type == "cpu" and not cpu_runs_bf16():
            raise PrecisionError("this CPU cannot run bf16 convolutions (torch's oneDNN needs AVX-512 or "
                                 "AVX-NE-CONVERT for them); use --precision auto or fp32")
        return DTYPES[precision], f"{precision}: asked for"
    if device.type != "cpu":
        dtype = pick_dtype(device)
        return dtype, f"{precision_name(dtype)}: the {device.type} default"
    start, measured = bf16_speed()
    if start is None:
        return torch.float32, f"fp32: {measured}"
    names = list(dict.fromkeys(models))
    cost = bf16_cost(names)
    if cost is None or cost > MAX_BF16_COST_DB:
        if cost is not None:
            cause = f"bf16 costs more than {MAX_BF16_COST_DB} dB ({cost:.4f} dB on valid)"
        elif len(names) > 1 and all(n in BF16_PSNR_COST_DB for n in names):
            cause = "no measured bf16 quality cost for the blend of " + ", ".join(str(n) for n in names)
        else:
            unknown = [str(n) for n in names if n not in BF16_PSNR_COST_DB]
            cause = "no measured bf16 quality cost for " + ", ".join(unknown or ["this model"])
        return torch.float32, f"fp32: {cause}"
    if pixels is not None and pixels < start:
        return torch.float32, (f"fp32: input under {start / 1e6:.2f} MP, where bf16 measured slower "
                               f"than fp32 on this kind of CPU")
    return torch.bfloat16, f"bf16: {measured}"


def choose_external_dtype(
    desc: ModelDescriptor, precision: str, device: torch.device, pixels: int | None = None,
) -> tuple[torch.dtype, str]:
    """(dtype, why) for a model of another architecture (``desc.arch``): what spandrel says it
    supports, and on a CPU where auto runs bf16, the first-use agreement check of
    :mod:`sr.external.bf16_check` (fp32 vs bf16 on a fixed image, at least
    :data:`~sr.external.bf16_check.MIN_AGREEMENT_DB` apart), cached per file."""
    precision = parse_precision(precision)
    arch = desc.architecture
    if precision == "bf16" and not desc.supports_bf16:
        raise PrecisionError(f"{arch} does not run in bf16 (spandrel says so); use --precision auto or fp32")
    if precision in DTYPES:
        return choose_dtype(precision, device)
    if device.type != "cpu":
        dtype = pick_dtype(device)
        ok = {torch.bfloat16: desc.supports_bf16, torch.float16: desc.supports_fp16}.get(dtype, True)
        if not ok:
            return torch.float32, f"fp32: spandrel says {arch} does not support {precision_name(dtype)}"
        return dtype, f"{precision_name(dtype)}: the {device.type} default"
    start, measured = bf16_speed()
    if start is None:
        return torch.float32, f"fp32: {measured}"
    if not desc.supports_bf16:
        return torch.float32, f"fp32: spandrel says {arch} does not support bf16"
    if pixels is not None and pixels < start:
        return torch.float32, (f"fp32: input under {start / 1e6:.2f} MP, where bf16 measured slower "
                               f"than fp32 on this kind of CPU")
    from ..external.bf16_check import MIN_AGREEMENT_DB, bf16_agreement

    db = bf16_agreement(desc)
    if db < MIN_AGREEMENT_DB:
        return torch.float32, (f"fp32: bf16 output {db:.1f} dB from fp32 on the check image (bf16 needs "
                               f">= {MIN_AGREEMENT_DB:g} dB)")
    return torch.bfloat16, f"bf16: {measured}; output {db:.1f} dB from fp32 on the check image"


def resolve_dtype(
    precision: str, device: torch.device, models: Iterable[str | None] = (), pixels: int | None = None,
) -> torch.dtype:
    """:func:`choose_dtype` without the reason."""
    return choose_dtype(precision, device, models, pixels)[0]


def precision_name(dtype: torch.dtype) -> str:
    """'fp32', 'bf16' or 'fp16': how benchmarks and logs name a dtype."""
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))
