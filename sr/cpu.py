"""What this machine's CPU is and can do: its vendor and family, its feature flags, how it multiplies
bf16, whether torch runs bf16 on it. Read from /proc/cpuinfo and torch, and below every layer that
asks (inference's precision and tile costs, training's AMX check, sr.external's per-CPU-kind caches).
"""

from __future__ import annotations

import torch


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles (Intel Sapphire Rapids and later), where bf16 matmuls and
    convolutions run on the matrix unit. torch exposes the check only privately, hence the guard."""
    check = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


CPUINFO = "/proc/cpuinfo"


def cpu_flags(path: str | None = None) -> frozenset[str] | None:
    """The CPU feature flags the kernel reports (Linux /proc/cpuinfo), or None where it cannot be read."""
    try:
        with open(path or CPUINFO) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return None


def cpu_model(path: str | None = None) -> tuple[str, int] | None:
    """(vendor, family) of the CPU as /proc/cpuinfo names them, e.g. ('AuthenticAMD', 25) for AMD Zen 3
    and Zen 4, 26 for Zen 5; None where they cannot be read (not Linux, ARM, a trimmed cpuinfo)."""
    found: dict[str, str] = {}
    try:
        with open(path or CPUINFO) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("vendor_id", "cpu family"):
                    found.setdefault(key.strip(), value.strip())
                if not line.strip():  # the first processor's block is enough
                    break
    except OSError:
        return None
    family = found.get("cpu family", "")
    if "vendor_id" not in found or not family.isdigit():
        return None
    return found["vendor_id"], int(family)


# How a CPU multiplies bf16 (cpu_bf16_kind): on AMX tiles, with AVX-512 BF16 dot products, or not at
# all (oneDNN converts to fp32 and back: slower than fp32 itself).
BF16_CPU_KINDS = ("amx", "avx512_bf16", "emulated")


def cpu_bf16_kind(path: str | None = None) -> str:
    """'amx' (AMX-BF16: Intel Sapphire Rapids and later), 'avx512_bf16' (AVX-512 BF16 without AMX:
    AMD Zen 4 and 5, Intel Cooper Lake) or 'emulated' (neither: AVX2-only CPUs such as AMD Zen 3).
    Where /proc/cpuinfo is missing, torch's own AMX check decides between 'amx' and 'emulated'."""
    flags = cpu_flags(path)
    if flags is None:
        return "amx" if cpu_has_amx() else "emulated"
    if "amx_bf16" in flags:
        return "amx"
    return "avx512_bf16" if "avx512_bf16" in flags else "emulated"


def cpu_runs_bf16() -> bool:
    """Whether torch can run bf16 convolutions on this CPU at all: oneDNN's bf16 path needs AVX-512
    (BW, VL, DQ) or AVX-NE-CONVERT, so an AVX2-only CPU (AMD Zen 3, most laptops before 2023) has
    none; torch's check decides, and where it is missing only AMX or AVX-512 BF16 count."""
    check = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else cpu_has_native_bf16()
    except (RuntimeError, AttributeError):
        return cpu_has_native_bf16()


def cpu_has_native_bf16() -> bool:
    """Whether the CPU multiplies bf16 in hardware (AMX or AVX-512 BF16), not by conversion."""
    return cpu_bf16_kind() != "emulated"
