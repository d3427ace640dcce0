"""The fused CPU kernel for routed region attention (``routed_kernel.cpp``): built once, cached, called.

:func:`fused_routed_attention` is :func:`~.tiered.tiered_attention`'s contract in one native call:
each query region's tokens attend to its routed key regions' tokens read in place from the token rows
(no gathered copies), fp32 softmax, fp32 accumulation, fp32 or bf16 in and out.

Build: the C++ source is compiled with the machine's C++ compiler (``$CXX``, else ``c++``) against
the installed torch's headers (:func:`torch.utils.cpp_extension.include_paths`) into a shared library
loaded with ctypes. It needs only ``ATen/Parallel.h`` (torch's thread pool), so a build takes seconds,
not the minute a Tensor-header extension takes, and it needs no ninja. The library holds AVX-512,
AVX2 and baseline variants chosen at run time, so one build serves any x86-64 CPU. It is cached in
``$SR_CACHE_DIR/kernels`` (default ``~/.cache/sr/kernels``, the root :func:`sr.cache.cache_dir`
names) under a key of the torch version, the machine architecture and a hash of the source and flags;
a file lock makes concurrent processes build it once, and a failed build is recorded under the same
key and compiler, so nobody waits on a compile twice. Where there is no compiler, the build fails, the
library does not load or its output on a check problem differs from the tiered path, or
``SR_ATTENTION_KERNEL=0``, the tiered path runs, and :func:`kernel_status` says why (logged once).

``sr info NAME`` and ``sr upscale -v`` print :func:`kernel_status`.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import fcntl
import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import torch

from ...cache import cache_dir
from .tiered import region_token_ids, tiered_attention

log = logging.getLogger(__name__)

SOURCES = tuple(Path(__file__).with_name(f) for f in ("routed_kernel.cpp", "upsample_add_kernel.cpp"))
LIB_NAME = "libsr_routed.so"
ENV_SWITCH = "SR_ATTENTION_KERNEL"  # "0" / "off" / "false": always the tiered path
FLAGS = ("-O3", "-std=c++20", "-fPIC", "-shared", "-fopenmp", "-Wno-psabi", "-fno-math-errno")
ISA_NAMES = {2: "AVX-512", 1: "AVX2", 0: "baseline"}
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1}


@dataclass(frozen=True)
class Kernel:
    """A loaded build: the ctypes function, the best ISA variant on this CPU and when it was built."""

    fn: ctypes._CFuncPtr
    up: ctypes._CFuncPtr  # sr_upsample_add
    isa: int
    built: str  # ISO date and time of the build
    path: Path

    def status(self) -> str:
        return f"fused C++ ({ISA_NAMES[self.isa]}, built {self.built})"


@dataclass(frozen=True)
class Unavailable:
    reason: str

    def status(self) -> str:
        return f"fallback: tiered SDPA ({self.reason})"


def cache_root() -> Path:
    """``$SR_CACHE_DIR/kernels``, else ``~/.cache/sr/kernels`` (:func:`sr.cache.cache_dir`)."""
    return cache_dir() / "kernels"


def compiler() -> str | None:
    """The C++ compiler a build would run (``$CXX``, else ``c++``, then ``g++``), or None."""
    for name in (os.environ.get("CXX"), "c++", "g++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _torch_dir() -> Path:
    return Path(torch.__file__).resolve().parent


def build_command(cxx: str, sources: tuple[Path, ...], target: Path) -> list[str]:
    from torch.utils.cpp_extension import include_paths

    lib = _torch_dir() / "lib"
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return [
        cxx, *FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(f"-I{p}" for p in include_paths()),
        *map(str, sources), "-o", str(target), f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}",
    ]


def build_key() -> str:
    """Torch version, architecture and a hash of the source and flags: what the library depends on.

    Not the CPU's features: the library picks its AVX-512 / AVX2 / baseline variant at run time."""
    content = b"".join(f.read_bytes() for f in SOURCES) + " ".join(FLAGS).encode()
    digest = hashlib.sha256(content).hexdigest()[:12]
    version = torch.__version__.replace("+", "_")
    return f"routed-torch{version}-{platform.machine()}-{digest}"


def _compiler_id(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return cxx
    return f"{cxx}: {out.splitlines()[0] if out else '?'}"


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` (created), released on exit, also when the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build(root: Path | None = None) -> tuple[Path | None, str]:
    """The cached library's path, building it first if needed; or (None, why not).

    Returns (path, built date) or (None, reason)."""
    root = root or cache_root()
    folder = root / build_key()
    lib, info_file, failed_file = folder / LIB_NAME, folder / "build.json", folder / "failed.json"
    cxx = compiler()
    if lib.is_file() and info_file.is_file():
        return lib, json.loads(info_file.read_text())["built"]
    if cxx is None:
        return None, "no C++ compiler ($CXX, c++ or g++) on PATH"
    cid = _compiler_id(cxx)
    with _locked(root / f"{build_key()}.lock"):
        if lib.is_file() and info_file.is_file():  # another process built it while we waited
            return lib, json.loads(info_file.read_text())["built"]
        if failed_file.is_file():
            failed = json.loads(failed_file.read_text())
            if failed.get("compiler") == cid:
                return None, f"the build failed before ({failed['error']}; delete {folder} to retry)"
        folder.mkdir(parents=True, exist_ok=True)
        log.warning("building the fused attention kernel once for this machine and torch (a few seconds)")
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            target = Path(tmp) / LIB_NAME
            cmd = build_command(cxx, SOURCES, target)
            error = _compile(cmd)
            if error is not None:
                record = {"compiler": cid, "error": error, "command": cmd}
                failed_file.write_text(json.dumps(record, indent=1))
                return None, f"the build failed ({error})"
            os.replace(target, lib)
        built = datetime.datetime.now().astimezone().isoformat(timespec="minutes")
        record = {"built": built, "compiler": cid, "command": cmd, "torch": torch.__version__}
        info_file.write_text(json.dumps(record, indent=1))
        failed_file.unlink(missing_ok=True)
        return lib, built


def _compile(cmd: list[str]) -> str | None:
    """Run the build command: None, or the first error line it printed."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{type(e).__name__}: {e}"
    return None if done.returncode == 0 else (_first_error(done.stderr) or f"exit {done.returncode}")


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if "error" in line:
            return line.strip()[:200]
    return stderr.strip().splitlines()[-1][:200] if stderr.strip() else ""


def load(path: Path, built: str) -> Kernel:
    lib = ctypes.CDLL(str(path))
    fn = lib.sr_routed_attention
    fn.restype = ctypes.c_int
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    fn.argtypes = [p, p, p, p, i64, i64, i64, p, i64, p, i64, i64, p, i64, i64, i64, i32, i32]
    lib.sr_routed_best_isa.restype = ctypes.c_int
    up = lib.sr_upsample_add
    up.restype = ctypes.c_int
    up.argtypes = [p, p, p, i64, i64, i64, i64, i64, i64, i32, i32]
    return Kernel(fn=fn, up=up, isa=lib.sr_routed_best_isa(), built=built, path=path)


def disabled() -> bool:
    return os.environ.get(ENV_SWITCH, "").strip().lower() in ("0", "off", "false", "no")


@functools.cache
def kernel() -> Kernel | Unavailable:
    """The kernel for this process, built and checked on first call; or why the tiered path runs.

    Cached per process (``kernel.cache_clear()`` to look again); the reason is logged once."""
    if disabled():
        return Unavailable(f"{ENV_SWITCH}={os.environ[ENV_SWITCH]}")
    if not sys.platform.startswith("linux"):
        return _unavailable(f"built on Linux only, not {sys.platform}")
    try:
        path, built = build()
        if path is None:
            return _unavailable(built)
        k = load(path, built)
    except OSError as e:  # an unwritable cache, a library that does not load
        return _unavailable(f"{type(e).__name__}: {e}")
    if not _agrees(k):
        return _unavailable(f"its output on a check problem differs from the tiered path's ({path})")
    return k


def _unavailable(reason: str) -> Unavailable:
    log.warning("fused attention kernel unavailable, the tiered path runs: %s", reason)
    return Unavailable(reason)


def kernel_status() -> str:
    """What routed attention runs on the CPU here: 'fused C++ (AVX-512, built <date>)' or
    'fallback: tiered SDPA (<reason>)'. Builds the kernel if it is not built yet."""
    return kernel().status()


def _agrees(k: Kernel) -> bool:
    """The kernel on two small odd problems (two images, k = 0 regions, several tiers; head sizes 16 and
    10) against the tiered path, fp32."""
    g = torch.Generator().manual_seed(0)
    b, h, w, p = 2, 8, 12, 4
    tokens = region_token_ids(b, h, w, p, torch.device("cpu"))
    n = (h // p) * (w // p)
    idx = torch.stack([torch.randperm(n, generator=g) for _ in range(b * n)]).view(b, n, n)
    k_int = torch.tensor([[0, 1, 2, 3, 6, 2], [6, 5, 4, 1, 1, 0]])
    for c, heads in ((48, 3), (20, 2)):
        rows = [torch.randn(b * h * w, c, generator=g) for _ in range(3)]
        with torch.autocast("cpu", enabled=False):  # the first use may come inside a caller's autocast
            ref = tiered_attention(*rows, tokens, idx, k_int, heads)
        try:
            out = call(k, *rows, tokens, idx, k_int, heads)
        except RuntimeError:
            return False
        if not torch.allclose(out, ref, atol=1e-5, rtol=1e-5):
            return False
    return True


_tiered_only: ContextVar[bool] = ContextVar("sr_tiered_only", default=False)


@contextlib.contextmanager
def tiered_only() -> Iterator[None]:
    """While inside, routed attention takes the tiered path even where the kernel runs (benches, tests)."""
    token = _tiered_only.set(True)
    try:
        yield
    finally:
        _tiered_only.reset(token)


def usable(q_rows: torch.Tensor) -> bool:
    """Whether :func:`~.routing.region_attention` takes the kernel for these rows (building it on the
    first call that could)."""
    return not _tiered_only.get() and supported(q_rows) and isinstance(kernel(), Kernel)


def supported(q_rows: torch.Tensor) -> bool:
    """Whether the kernel may take these rows: CPU, fp32 or bf16, channels contiguous, no autograd,
    tracing, export or compile, and nobody counting ops (the MAC and FLOP counters see SDPA calls)."""
    from ..fused import _watched, add_in_place_ok

    if torch.compiler.is_compiling() or not add_in_place_ok() or q_rows.requires_grad:
        return False
    return (q_rows.device.type == "cpu" and q_rows.dtype in DTYPE_CODES and q_rows.stride(1) == 1
            and not _watched())


def call(k: Kernel, q_rows: torch.Tensor, k_rows: torch.Tensor, v_rows: torch.Tensor, tokens: torch.Tensor,
         idx: torch.Tensor, k_int: torch.Tensor, heads: int, isa: int = -1) -> torch.Tensor:
    """Run the kernel: the arguments of :func:`~.tiered.tiered_attention`; ``isa`` forces a variant
    (2 AVX-512, 1 AVX2, 0 baseline; -1 the best this CPU runs). Returns (T, C) rows in q's dtype."""
    t, c = q_rows.shape
    dtype = q_rows.dtype
    if (k_rows.dtype, v_rows.dtype) != (dtype, dtype) or dtype not in DTYPE_CODES:
        got = ", ".join(str(r.dtype) for r in (q_rows, k_rows, v_rows))
        raise RuntimeError(f"q, k, v must share fp32 or bf16, got {got}")
    if c % heads or any(r.shape != (t, c) or r.stride(1) != 1 for r in (q_rows, k_rows, v_rows)):
        raise RuntimeError("q, k, v must be (T, C) rows with contiguous channels and C divisible by heads")
    b, n, kk = idx.shape
    tokens, idx = tokens.to(torch.int64).contiguous(), idx.to(torch.int64).contiguous()
    k_flat = k_int.reshape(-1).to(torch.int64).contiguous()
    if tokens.shape[0] != b * n or k_flat.numel() != b * n:
        shapes = f"tokens {tuple(tokens.shape)}, k_int {tuple(k_int.shape)}, idx {(b, n, kk)}"
        raise RuntimeError(f"region counts differ: {shapes}")
    # the kernel reads where these point: out-of-range ids are an error here, not a stray read there
    if b * n and not (_within(tokens, t) and _within(idx, n) and _within(k_flat, kk + 1)):
        raise RuntimeError(f"token ids, region ids or k out of range (T = {t}, N = {n}, K = {kk})")
    out = q_rows.new_empty((t, c))
    rc = k.fn(q_rows.data_ptr(), k_rows.data_ptr(), v_rows.data_ptr(), out.data_ptr(), q_rows.stride(0),
              k_rows.stride(0), v_rows.stride(0), tokens.data_ptr(), tokens.shape[1], idx.data_ptr(), n, kk,
              k_flat.data_ptr(), b * n, c, heads, DTYPE_CODES[dtype], isa)
    if rc:
        raise RuntimeError("the fused kernel " + ("lacks that ISA variant here" if rc == 1 else "failed"))
    return out


def _within(t: torch.Tensor, end: int) -> bool:
    lo, hi = torch.aminmax(t)
    return 0 <= int(lo) and int(hi) < end


def fused_routed_attention(q_rows, k_rows, v_rows, tokens, idx, k_int, heads, stats: dict | None = None):
    """:func:`~.tiered.tiered_attention` through the kernel (which must be loaded: :func:`kernel`)."""
    k = kernel()
    assert isinstance(k, Kernel)
    out = call(k, q_rows, k_rows, v_rows, tokens, idx, k_int, heads)
    if stats is not None:
        stats["gathered"] = stats.get("gathered", 0) + int(k_int.sum())
        stats["calls"] = stats.get("calls", 0) + 1
    return out


def upsample_add_usable(small: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether :func:`upsample_add` may take ``x + upsample(small)``: both CPU maps of one fp32 / bf16
    dtype, channels-last contiguous, at eager inference, the kernel loaded."""
    cl = torch.channels_last
    return (not _tiered_only.get() and small.dtype == x.dtype and small.shape[:2] == x.shape[:2]
            and small.is_contiguous(memory_format=cl) and x.is_contiguous(memory_format=cl)
            and supported(x) and isinstance(kernel(), Kernel))


def upsample_add(small: torch.Tensor, x: torch.Tensor, isa: int = -1) -> torch.Tensor:
    """``x + F.interpolate(small, size=x.shape[-2:], mode="bilinear", align_corners=False)`` in one pass
    (a new map, channels-last; the sum rounded once): the end of a stride > 1 attention block.
    small: (B, C, h', w'), x: (B, C, h, w), both channels-last contiguous, fp32 or bf16."""
    k = kernel()
    assert isinstance(k, Kernel)
    b, c, hs, ws = small.shape
    h, w = x.shape[-2:]
    out = torch.empty_like(x, memory_format=torch.channels_last)
    rc = k.up(small.data_ptr(), x.data_ptr(), out.data_ptr(), b, hs, ws, h, w, c, DTYPE_CODES[x.dtype], isa)
    if rc:
        raise RuntimeError("the fused upsample " + ("lacks that ISA variant here" if rc == 1 else "failed"))
    return out
