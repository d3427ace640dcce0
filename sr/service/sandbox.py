"""Decode uploads in child processes whose CPU time and memory the kernel bounds.

The pre-checks of :mod:`sr.io` (scan counts, metadata sizes, page counts) refuse the known decoder
pathologies in microseconds; this module is the guarantee behind them: any decode, known bomb or not,
costs at most its limits. Each :class:`Sandbox` keeps a few child processes, each started as
``python -m sr.service.sandbox_child`` (:mod:`sr.service.sandbox_child`, the child's side) with

- ``RLIMIT_AS`` (address space): a decode that allocates past it gets a MemoryError (413) or dies;
- ``RLIMIT_CPU``: set before each job to the CPU the child has used plus the job's allowance, so a
  decoder stuck in a loop gets SIGXCPU from the kernel;
- a wall-clock deadline kept by the parent (a child that sleeps, or waits for CPU on a busy machine,
  is killed at ``wall_s``).

A child that dies or is killed is replaced; the job gets a :class:`SandboxLimitError` (-> 422). Any
exception the decoder raises is the file's, answered as a typed decode error by a child that
lives on: only its limits (or a crash) end a child.

Messages are typed (:mod:`sr.service.sandbox_protocol`: a :class:`JobMessage` one way; a
:class:`ProbeReply`, :class:`PngReply`, :class:`ImageReply` or :class:`ErrorReply` the other, in a
:class:`Reply`), sent as small JSON datagrams on a ``SOCK_SEQPACKET`` socket pair; bulk bytes
travel as memfds passed with ``SCM_RIGHTS``: the upload goes in one, decoded pixels come back in
others, mapped by the parent as the numpy arrays of its :class:`~sr.io.DecodedImage` (no copy of a
big image in the parent, none through a pipe). A child's :class:`~sr.io.ImageError` comes back as
an :class:`ErrorReply` whose :class:`~sr.service.sandbox_protocol.ErrorKind` names its class in one
table (``ERROR_CLASSES``).

Operations (:class:`Op`): :meth:`Sandbox.probe` (size and orientation from the header, as
:func:`sr.io.read_size`), :meth:`Sandbox.decode` (:func:`sr.io.read_image`), :meth:`Sandbox.preview`
(the decoded input as an 8-bit PNG: a 16-bit 4096^2 RGBA upload never reaches the server's own
memory as float pixels).
"""

from __future__ import annotations

import json
import mmap
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import numpy as np

import sr.io as sio

from .jobs import JobStopped
from .sandbox_protocol import (
    MAX_FDS,
    MAX_MESSAGE,
    ErrorReply,
    ImageReply,
    JobMessage,
    Op,
    PngReply,
    ProbeReply,
    Reply,
    Result,
)

P = ParamSpec("P")
T = TypeVar("T")

CHILD_MODULE = "sr.service.sandbox_child"
START_TIMEOUT_S = 60.0      # python + numpy + Pillow import on a loaded 2-core machine


class SandboxError(RuntimeError):
    """The sandbox could not run a job (a child failed to start, the server is stopping)."""


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 2 * 2**30   # RLIMIT_AS of each child
    cpu_s: float = 60.0             # CPU seconds per job (RLIMIT_CPU, whole seconds, rounded up)
    wall_s: float = 120.0           # wall-clock seconds per job (the parent kills the child)


@dataclass(frozen=True)
class Probe:
    width: int       # as decoded: EXIF orientation applied, wherever the decoder finds it
    height: int
    orientation: int


class _Child:
    def __init__(self, memory_bytes: int) -> None:
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", CHILD_MODULE, "--fd", str(child_sock.fileno()),
                 "--memory", str(memory_bytes)],
                pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL, env=env, close_fds=True,
                start_new_session=True,  # a Ctrl-C to the server's terminal is the server's to handle
            )
        finally:
            child_sock.close()
        self.sock = parent_sock
        self.ready = False

    def wait_ready(self, timeout: float) -> None:
        if self.ready:
            return
        self.sock.settimeout(timeout)
        try:
            raw, _ = _receive(self.sock)
            ready = json.loads(raw).get("ready") is True
        except (OSError, ValueError) as e:
            self.kill()
            raise SandboxError(f"decoder process did not start ({e or 'closed'})") from None
        if not ready:
            self.kill()
            raise SandboxError("decoder process did not start")
        self.ready = True

    def kill(self) -> None:
        with _suppress_os():
            self.proc.kill()
        with _suppress_os():
            self.proc.wait(5)
        self.sock.close()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class Sandbox:
    """``processes`` decoder children, each job on one of them within :class:`Limits`.

    :meth:`probe`, :meth:`decode` and :meth:`preview` block (call them from a worker thread);
    :meth:`call` is their asyncio form, on the sandbox's own threads (never the event loop's default
    pool, which sync endpoints share).
    """

    def __init__(self, processes: int, limits: Limits | None = None, name: str = "sandbox") -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        self.processes = processes
        self.limits = limits or Limits()
        self.name = name
        self._idle: queue.LifoQueue[_Child | None] = queue.LifoQueue()
        for _ in range(processes):
            self._idle.put(None)  # a slot whose child is started on first use
        self._executor = ThreadPoolExecutor(max_workers=processes, thread_name_prefix=f"sr-{name}")
        self._lock = threading.Lock()
        self._closed = False
        self.stats = {"jobs": 0, "killed": 0, "retired": 0, "started": 0, "cpu_s": 0.0}

    def start(self) -> None:
        """Start every child now (in the background), so the first requests do not pay for it."""
        children = [self._idle.get() for _ in range(self.processes)]
        for child in children:
            self._idle.put(child if child is not None else self._spawn())

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until every started child has imported its decoder (a child that fails is replaced
        on first use)."""
        children = [self._idle.get() for _ in range(self.processes)]
        try:
            for child in children:
                if child is not None:
                    try:
                        child.wait_ready(timeout)
                    except SandboxError:
                        pass
        finally:
            for child in children:
                self._idle.put(child if child is None or child.alive else None)

    def _spawn(self) -> _Child:
        with self._lock:
            self.stats["started"] += 1
        return _Child(self.limits.memory_bytes)

    def close(self) -> None:
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        while True:
            try:
                child = self._idle.get_nowait()
            except queue.Empty:
                return
            if child is not None:
                child.kill()

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` (one of this sandbox's operations) on the sandbox's own threads."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    def probe(self, data: bytes, max_pixels: int | None = None, cpu_s: float | None = None,
              wall_s: float | None = None, should_stop: Callable[[], bool] | None = None) -> Probe:
        """The upload's size (EXIF orientation applied) and orientation, from its header."""
        return self._run(Op.PROBE, data, max_pixels, cpu_s, wall_s, should_stop, _probe_of)

    def decode(self, data: bytes, max_pixels: int | None = None, cpu_s: float | None = None,
               wall_s: float | None = None,
               should_stop: Callable[[], bool] | None = None) -> sio.DecodedImage:
        """The upload as :func:`sr.io.read_image` decodes it, its arrays mapped from the child's memfds."""
        return self._run(Op.DECODE, data, max_pixels, cpu_s, wall_s, should_stop, _image_of)

    def preview(self, data: bytes, max_pixels: int | None = None, cpu_s: float | None = None,
                wall_s: float | None = None, should_stop: Callable[[], bool] | None = None) -> bytes:
        """The decoded upload as an 8-bit PNG."""
        return self._run(Op.PREVIEW, data, max_pixels, cpu_s, wall_s, should_stop, _png_of)

    def _run(self, op: Op, data: bytes, max_pixels: int | None, cpu_s: float | None, wall_s: float | None,
             should_stop: Callable[[], bool] | None, read: Callable[[Result, list[int]], T]) -> T:
        """``op`` on ``data`` in a child, its result read by ``read``. Raises the child's
        :class:`~sr.io.ImageError` as is, :class:`SandboxLimitError` when the job ran out of time or
        memory (the child is then killed and replaced)."""
        if self._closed:
            raise SandboxError("the server is stopping")
        if not data:
            raise sio.ImageDecodeError("empty file (0 bytes)")
        job = JobMessage(op, len(data), max_pixels, self.limits.cpu_s if cpu_s is None else cpu_s)
        wall = self.limits.wall_s if wall_s is None else wall_s
        child = self._idle.get()
        keep: _Child | None = None
        try:
            if child is None or not child.alive:
                if child is not None:
                    child.kill()
                child = self._spawn()
            child.wait_ready(START_TIMEOUT_S)
            reply, fds = self._exchange(child, job, data, wall, should_stop)
            if reply.retire:
                with self._lock:
                    self.stats["retired"] += 1
                child.kill()
            else:
                keep = child
            return _read_result(reply.result, fds, read)
        finally:
            with self._lock:
                self.stats["jobs"] += 1
            if keep is None and child is not None and child.alive:
                child.kill()
            # A killed or retired child's replacement starts now, off this request's path.
            self._idle.put(keep if keep is not None else (None if self._closed else self._spawn_quietly()))

    def _spawn_quietly(self) -> _Child | None:
        try:
            return self._spawn()
        except OSError:
            return None  # started again on next use

    def _exchange(self, child: _Child, job: JobMessage, data: bytes, wall: float,
                  should_stop: Callable[[], bool] | None) -> tuple[Reply, list[int]]:
        upload = os.memfd_create("sr-upload", os.MFD_CLOEXEC)
        try:
            os.ftruncate(upload, len(data))
            with mmap.mmap(upload, len(data)) as m:
                m[:] = data
            socket.send_fds(child.sock, [job.encode()], [upload])
        except OSError as e:
            child.kill()
            raise SandboxError(f"decoder process unreachable ({e})") from None
        finally:
            os.close(upload)
        cpu = job.cpu_s
        deadline = time.monotonic() + wall
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._killed(child)
                raise limit_error("time", wall)
            # Short waits: a request that gave up (client gone, its own timeout) frees the child early.
            child.sock.settimeout(min(left, 0.25))
            try:
                raw, fds = _receive(child.sock)
                break
            except TimeoutError:
                if should_stop is not None and should_stop():
                    self._killed(child)
                    raise JobStopped("job stopped: the request gave up") from None
            except (OSError, ValueError):  # the child died: SIGXCPU, an out-of-memory kill, a crash
                code = _exit_code(child)
                self._killed(child)
                if code == -signal.SIGXCPU or code == -signal.SIGKILL:
                    raise limit_error("cpu", cpu) from None
                raise limit_error("crash", code) from None
        reply = Reply.decode(raw)
        with self._lock:
            self.stats["cpu_s"] += reply.cpu_s
        return reply, fds

    def _killed(self, child: _Child) -> None:
        with self._lock:
            self.stats["killed"] += 1
        child.kill()


def _exit_code(child: _Child) -> int | None:
    try:
        return child.proc.wait(2)
    except subprocess.TimeoutExpired:
        return None


def limit_error(kind: str, value: float | int | None) -> Exception:
    """The refusal of a decode that hit a limit: ``kind`` "time" / "cpu" (the limit, in s), or "crash"
    (the exit status, None when it could not be read)."""
    # only the kind's own sentence is formatted: a crash may have no exit status to read (None)
    if kind == "time":
        return SandboxLimitError(f"decoding took over {value:g} s of wall-clock time (the decoder's limit); "
                                 "the decoder was stopped")
    if kind == "cpu":
        return SandboxLimitError(f"decoding used over {value:g} s of CPU (the decoder's limit); "
                                 "the decoder was stopped")
    # A child answers every exception it catches; one that dies anyway was killed (out of memory,
    # a signal) while decoding: refused by the decoder's limits, not "before decoding".
    status = "no exit status" if value is None else f"exit status {value}"
    return SandboxLimitError(f"the decoder process failed on this file ({status})")


def _sandbox_limit_error_type() -> type:
    from sr.io import DecodeLimitError

    class _SandboxLimitError(DecodeLimitError):
        """A decode that ran out of its CPU, wall-clock or memory allowance, or whose child died
        while decoding (-> 422)."""

    _SandboxLimitError.__name__ = _SandboxLimitError.__qualname__ = "SandboxLimitError"
    return _SandboxLimitError


SandboxLimitError = _sandbox_limit_error_type()


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    raw, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if not raw:
        for fd in fds:
            os.close(fd)
        raise ValueError("closed")
    return raw, fds


def _mapped(fd: int, shape: list[int], dtype: str) -> np.ndarray:
    """The array a child left in memfd ``fd``, mapped (not copied) into this process."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    try:
        if size == 0:
            return np.zeros(shape, dtype)
        m = mmap.mmap(fd, size)  # MAP_SHARED, read-write: the engine may work on it in place
    finally:
        os.close(fd)
    return np.frombuffer(m, dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def _read_result(result: Result, fds: list[int], read: Callable[[Result, list[int]], T]) -> T:
    """``read(result, fds)``, the child's error raised instead; every fd closed after."""
    try:
        if isinstance(result, ErrorReply):
            raise result.error()
        return read(result, fds)
    finally:
        for fd in fds:
            with _suppress_os():
                os.close(fd)


def _probe_of(result: Result, fds: list[int]) -> Probe:
    if not isinstance(result, ProbeReply):
        raise SandboxError(f"decoder answered a probe with {type(result).__name__}")
    return Probe(result.width, result.height, result.orientation)


def _png_of(result: Result, fds: list[int]) -> bytes:
    if not isinstance(result, PngReply):
        raise SandboxError(f"decoder answered a preview with {type(result).__name__}")
    with mmap.mmap(fds[0], result.size, prot=mmap.PROT_READ) as m:
        return bytes(m)


def _image_of(result: Result, fds: list[int]) -> sio.DecodedImage:
    if not isinstance(result, ImageReply):
        raise SandboxError(f"decoder answered a decode with {type(result).__name__}")
    pixels = _mapped(fds.pop(0), result.shape, result.dtype)
    alpha = _mapped(fds.pop(0), result.alpha_shape, result.dtype) if result.alpha_shape else None
    icc = None
    if result.icc_size:
        with mmap.mmap(fds[0], result.icc_size, prot=mmap.PROT_READ) as m:
            icc = bytes(m)
    return sio.DecodedImage(pixels, alpha, result.bit_depth, icc, result.format, result.mode)


class _suppress_os:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        return kind is not None and issubclass(kind, (OSError, subprocess.TimeoutExpired))
