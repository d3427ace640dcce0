"""Device, dtype and CPU-thread choices for inference, and how much memory a tile may use (what the
CPU itself is and can do: :mod:`sr.cpu`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# precision imports these CPU facts from here; they live in sr.cpu, below every layer that asks

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
