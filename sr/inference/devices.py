"""Device, dtype and CPU-thread choices for inference, and how much memory a tile may use."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


class DeviceError(ValueError):
    """An unknown or unavailable device."""


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    """'auto' = CUDA, then MPS, then CPU; 'cuda:1' style indices are accepted and checked."""
    text = str(name).strip().lower()
    if text == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        choices = ", ".join(DEVICE_CHOICES)
        raise DeviceError(f"unknown device {name!r}; choose from {choices} (or cuda:N)") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError("device 'cuda' is not available here (no CUDA GPU, or a CPU-only torch)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(f"device {text!r} does not exist ({torch.cuda.device_count()} CUDA device(s))")
        return device
    if device.type == "mps":
        if not _mps_available():
            raise DeviceError("device 'mps' is not available on this machine")
        return device
    raise DeviceError(f"unsupported device {name!r}; choose from {', '.join(DEVICE_CHOICES)} (or cuda:N)")


def pick_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA when supported (fp16's range can overflow in attention scores), else fp16 on a GPU;
    always fp32 on CPU, where half precision is slow and inaccurate."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


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


def usable_cpus() -> int:
    """CPUs this process may run on (respects taskset/cgroup affinity, unlike os.cpu_count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_threads(threads: int | None) -> int:
    """The intra-op thread count an engine runs with: the number given, else one per usable CPU at
    most (torch's own default counts every core of the machine, which oversubscribes a container
    limited to fewer). Sets nothing: :func:`torch_settings` applies it around the engine's work."""
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return threads if threads is not None else min(torch.get_num_threads(), usable_cpus())


def configure_threads(threads: int | None) -> int:
    """Set torch's intra-op threads for the whole process (:func:`resolve_threads`' count): for entry
    points that own the process, such as benchmarks; engines use :func:`torch_settings` instead."""
    n = resolve_threads(threads)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


class _CudnnAutotuneOff:
    """cuDNN's per-shape autotuning held off while any engine forward runs. The flag is process-wide,
    so concurrent holders share one hold: the first saves the flag, the last puts it back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._before = False

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._before = torch.backends.cudnn.benchmark
                torch.backends.cudnn.benchmark = False
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    torch.backends.cudnn.benchmark = self._before


_CUDNN_AUTOTUNE_OFF = _CudnnAutotuneOff()


@contextmanager
def torch_settings(device: torch.device, threads: int) -> Iterator[None]:
    """Run the body with ``threads`` intra-op threads and, on CUDA, without cuDNN's per-shape
    autotuning (it times every algorithm for each new input shape: the trainer wants that for its
    fixed patches, serving does not); then put both back as they were.

    An engine wraps its own loads and forwards in this, so building or running one leaves the
    process's settings as it found them. torch's OpenMP build keeps the thread count per calling
    thread, so concurrent calls on threads of their own each run with their engine's count, with
    one exception: a compiled extension (sr's native attention kernels) starts a thread's count, on
    that thread's first parallel loop in it, from the count torch last set on any thread. Where
    engines of different counts run at once, a new thread's first call may run partly with another
    engine's count; its later calls run with their own."""
    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        if device.type == "cuda":
            with _CUDNN_AUTOTUNE_OFF.held():
                yield
        else:
            yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def available_memory(device: torch.device) -> int:
    """Bytes free for tiles: free device memory on CUDA, MemAvailable (or free pages) for CPU/MPS."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 2 * 2**30  # unknown platform: assume a modest 2 GiB
