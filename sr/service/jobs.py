"""A bounded pool for blocking inference jobs, run off the event loop.

At most ``workers`` jobs run and at most ``max_queue`` wait; a job beyond that is refused at once
(:class:`QueueFullError`, the caller answers 503 + Retry-After) instead of piling up. Each job has a
time limit counted from admission, queue wait included (:class:`JobTimeoutError` -> 504).

A job whose request gives up (time limit passed, client gone) is told to stop: its ``stop`` event is
set, and the engine, which polls it before every network forward (each tile, ensemble view and
pass), abandons the work there (:class:`sr.inference.UpscaleCancelled`). The slot is freed when the
worker reaches that point, within one forward, so the pool never holds more than
``workers + max_queue`` jobs, whatever the clients do. A job still waiting is dropped from the queue.

Time is predicted by one :class:`WorkModel` (issue 45): each job declares its :class:`Work` (network
forwards, the megapixels its tiles output, the megapixels decoded and encoded); seconds are a
per-item cost measured on this machine times a factor learnt from the jobs that completed, times
the machine's current load, a moving average over the last jobs of all kinds (issue 54). The same
prediction refuses a job that cannot finish within the time limit (the app's 422), refuses one that
would start too late to finish in time (503), and gives ``Retry-After``: the predicted time until
a slot frees (:meth:`JobPool.schedule`).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import heapq
import itertools
import math
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# Rough per-item costs (asa-base x2 on 2 CPU cores: ~0.8 output MP/s idle; a 1-row tile's forward
# took 5-30 ms depending on the load). They only set the units: the factors measured at start-up and
# learnt from jobs (WorkModel) scale them to the model served and the machine's load. Measured with
# the factors, 1x100000 and 1x200000 strips (202 and 404 forwards) were predicted 1.24 and 2.48 s
# and took 1.02 and 1.93 s; 384x384 was predicted 0.82 s and took 0.87 s.
PRIOR_SECONDS_PER_JOB = 0.05
PRIOR_SECONDS_PER_FORWARD = 0.03
PRIOR_SECONDS_PER_MP = 1.25       # per megapixel the network outputs, tile overlaps included
PRIOR_SECONDS_PER_IO_MP = 0.1     # per megapixel decoded or encoded
EMA_WEIGHT = 0.2
# The load: how much slower than calibrated the network ran in the last jobs, whatever their size,
# a moving average of seconds per unit of network work. It moves fast (a third of the way per job,
# in log space) because the machine's load does: with two trainings beside it a job ran 2-3x slower
# than at start-up, while the per-forward and per-megapixel factors, which only a job dominated by
# their part could teach, kept the start-up speed. Thin strips and 67-MP images were admitted on
# it and ran to a 504 (issue 54's soak: 18 of 298 requests).
LOAD_WEIGHT = 1 / 3
LOAD_RANGE = (0.05, 20.0)
# The load is a ratio measured on the jobs that ran, and it does not carry to a far bigger job: a
# 64x64 upload ran at 0.7x its predicted network time, a 1536^2 one at 1.04x (asa-base x2, one
# thread, idle), so a stream of small jobs talked the load down to 0.7 and a 67-MP job was predicted
# at 22 s, admitted under a 30-s limit and ran into a 504 (issue 54's soak: 21 of 25). A job more
# than EXTRAPOLATE_ABOVE times the network work of the biggest recent teacher is predicted at no
# less than the start-up speed, with a margin; the teacher's size fades by TAUGHT_DECAY per job.
EXTRAPOLATE_ABOVE = 4.0
EXTRAPOLATION_MARGIN = 1.25
TAUGHT_DECAY = 0.98
FACTOR_RANGE = (0.02, 50.0)       # one odd job (a swapped-out page, a cold cache) moves it only so far
MAX_RETRY_AFTER_S = 3600
# After a job that decoded or encoded this many megapixels, and after every TRIM_EVERY_JOBS jobs,
# freed memory goes back to the system: glibc keeps freed blocks in its per-thread arenas (the
# event loop's, the workers', the thread pool's). In issue 54's soaks the server's RSS crept
# 458 -> 625 MB with big strips among the jobs, and 337 -> 380 MB (+13%, linearly) with small jobs
# only, while the same requests through the app in one thread held flat: no Python object leaked.
# A strip upscaled four times in one process held +29 MB without malloc_trim, +0 with.
TRIM_AFTER_IO_MP = 1.0
TRIM_EVERY_JOBS = 256
DISCONNECT_POLL_S = 0.25


class JobStopped(RuntimeError):
    """The request gave up (timeout, client gone) between the job's stages."""


class QueueFullError(RuntimeError):
    def __init__(self, retry_after: int, ahead: int | None = None, reason: str | None = None) -> None:
        jobs = f" by {ahead} jobs" if ahead is not None else ""
        why = reason or f"all workers and queue slots are taken{jobs}"
        super().__init__(f"server busy: {why}; retry in {retry_after} s (the predicted time for a "
                         "slot to free)")
        self.retry_after = retry_after
        self.ahead = ahead


class JobTimeoutError(TimeoutError):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"request took longer than the server's limit of {seconds:g} s")
        self.seconds = seconds


class ClientGoneError(ConnectionError):
    """The client disconnected while its job waited or ran; the job was told to stop."""


@dataclass(frozen=True)
class Work:
    """What a job costs, in the units :class:`WorkModel` counts."""

    forwards: int = 0         # network forwards: tiles x passes, x8 with tta
    tiled_mp: float = 0.0     # megapixels the network outputs, over every tile as run (overlaps included)
    io_mp: float = 0.0        # megapixels decoded and encoded


class WorkModel:
    """Seconds a job takes: per-item costs (the priors), each part times a factor measured here, the
    network's parts also times its current load.

    Three parts, because they do not move together: the fixed cost of a job (per job, per decoded or
    encoded pixel), the network's cost per forward (what a thin image's many tiles cost) and its
    cost per megapixel. The forward and megapixel factors are measured at start-up
    (:meth:`calibrate`: a square image, then a strip of thin tiles) and give the network's shape.

    Each completed job that reports its network seconds (``network_s``, the engine's stage) then
    teaches two averages: the fixed factor from the rest of its time, and the ``load`` from the
    network seconds per unit of predicted network work. Every job moves the load, so the small jobs
    that make most of the traffic keep the prediction of a rare big one current when other
    processes slow the machine down. A job's time split by stage, not by guess: a total alone cannot
    tell the parts apart, and hundreds of small jobs (mostly fixed cost) talked the megapixel factor
    down until a 67-megapixel job looked like 30 s (issue 45's soak: admitted, it ran to the limit).
    A job without stage times teaches the factor of the part that dominated its prediction.

    A job stopped at the time limit still says something: it ran ``elapsed`` seconds and was not
    done. When that is more than its prediction, :meth:`overran` moves the load towards it.

    The load is only trusted for jobs of the size that taught it (:meth:`load_for`): a job far
    bigger than any recent one is predicted at no less than the start-up speed, times a margin.
    """

    def __init__(self) -> None:
        self.fixed_factor = 1.0
        self.forward_factor = 1.0
        self.mp_factor = 1.0
        self.load = 1.0
        self.taught = 0.0  # network seconds (calibrated) of the biggest recent job that taught the load
        self._seen = 0

    @staticmethod
    def parts(work: Work) -> tuple[float, float, float]:
        """(fixed, per-forward, per-megapixel) seconds at the priors' rates."""
        return (PRIOR_SECONDS_PER_JOB + PRIOR_SECONDS_PER_IO_MP * work.io_mp,
                PRIOR_SECONDS_PER_FORWARD * work.forwards, PRIOR_SECONDS_PER_MP * work.tiled_mp)

    def _network(self, work: Work) -> float:
        """Network seconds at the calibrated speed (no load)."""
        _, forwards, per_mp = self.parts(work)
        return self.forward_factor * forwards + self.mp_factor * per_mp

    def load_for(self, network: float) -> float:
        """The load to predict ``network`` calibrated seconds of network work with: the learnt one
        within EXTRAPOLATE_ABOVE of the jobs that taught it, else at least 1 (the start-up speed),
        times EXTRAPOLATION_MARGIN. Before any measurement the priors stand as they are."""
        if self.taught > 0 and network > EXTRAPOLATE_ABOVE * self.taught:
            return max(self.load, 1.0) * EXTRAPOLATION_MARGIN
        return self.load

    def predict(self, work: Work) -> float:
        network = self._network(work)
        return self.fixed_factor * self.parts(work)[0] + self.load_for(network) * network

    def _taught_by(self, network: float) -> None:
        self.taught = max(self.taught * TAUGHT_DECAY, network)

    def calibrate(self, square: tuple[Work, float], strip: tuple[Work, float]) -> None:
        """Forward and megapixel factors from two timed network runs (no fixed cost: no HTTP, no
        decode): ``square`` mostly megapixels, ``strip`` mostly forwards. The load is the unit then."""
        (_, f1, m1), t1 = self.parts(square[0]), square[1]
        (_, f2, m2), t2 = self.parts(strip[0]), strip[1]
        det = m1 * f2 - m2 * f1
        low, high = FACTOR_RANGE
        if abs(det) < 1e-12:
            return
        mp = (t1 * f2 - t2 * f1) / det  # m1*mp + f1*fw = t1; m2*mp + f2*fw = t2
        fw = (m1 * t2 - m2 * t1) / det
        if mp <= 0 or fw <= 0:  # timing noise beyond what two runs can separate: one shared factor
            mp = fw = (t1 + t2) / (f1 + m1 + f2 + m2)
        self.mp_factor, self.forward_factor = min(max(mp, low), high), min(max(fw, low), high)
        self.fixed_factor = self.mp_factor  # until jobs teach it: the same machine speed
        self.load = 1.0
        self.taught = max(self._network(square[0]), self._network(strip[0]))

    def learn(self, work: Work, elapsed: float, network_s: float | None = None,
              weight: float = EMA_WEIGHT) -> None:
        """Move the averages towards what this job measured, in log space (a job twice as slow and
        one twice as fast cancel out); the first jobs are averaged (weight 1/n: the priors and the
        start-up's timings are left quickly), later ones a moving average.

        With ``network_s`` (the job's network seconds): the fixed factor learns from the rest, the
        load from the network seconds. Without: the factor of the part that dominated.
        """
        self._seen += 1
        first = 1 / self._seen
        fixed, _, _ = self.parts(work)
        network = self._network(work)
        if network_s is not None and network > 0:
            rest = max(elapsed - network_s, 0.0)
            self.fixed_factor = _moved(self.fixed_factor, rest / fixed, max(weight, first), FACTOR_RANGE)
            self.load = _moved(self.load, network_s / network, max(LOAD_WEIGHT, first), LOAD_RANGE)
            self._taught_by(network)
            return
        predicted = self.predict(work)
        name = self._dominant(work)
        setattr(self, name, _moved(getattr(self, name), getattr(self, name) * elapsed / predicted,
                                   max(weight, first), FACTOR_RANGE))

    def overran(self, work: Work, elapsed: float) -> None:
        """A job stopped after ``elapsed`` seconds, unfinished: it takes at least that long. The
        load moves towards what would explain it, as a completed job's would; not a factor, which
        no later job could bring down again once every job of that size got a 422."""
        predicted = self.predict(work)
        network = self._network(work)
        if elapsed <= predicted or network <= 0:
            return
        needed = (elapsed - self.fixed_factor * self.parts(work)[0]) / network
        self.load = _moved(self.load, needed, LOAD_WEIGHT, LOAD_RANGE)  # a lower bound: not a teacher

    def _dominant(self, work: Work) -> str:
        fixed, forwards, per_mp = self.parts(work)
        load = self.load_for(self._network(work))
        shares = {"fixed_factor": self.fixed_factor * fixed,
                  "forward_factor": load * self.forward_factor * forwards,
                  "mp_factor": load * self.mp_factor * per_mp}
        return max(shares, key=shares.__getitem__)


def _load_libc() -> ctypes.CDLL | None:
    """The C library, for glibc's allocator controls; None where it cannot be loaded."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


_LIBC = _load_libc()
# Both are glibc's; None elsewhere (musl, macOS), where the calls below do nothing.
_MALLOC_TRIM = getattr(_LIBC, "malloc_trim", None)
_MALLOPT = getattr(_LIBC, "mallopt", None)
# glibc raises its mmap threshold to the size of each big block freed (up to 32 MiB), so after one
# 19 MB upload body every later one comes from the heap, where freed space fragments instead of
# going back to the system. A fixed threshold (which also stops that adjustment) keeps big buffers
# mmapped, each returned whole when freed.
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h


def fix_mmap_threshold(size: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold at ``size`` bytes for this process; False without glibc."""
    return _MALLOPT is not None and bool(_MALLOPT(_M_MMAP_THRESHOLD, size))


def return_freed_memory() -> None:
    """Hand the allocator's free pages back to the system (a few ms; a no-op without glibc)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _moved(value: float, target: float, weight: float, bounds: tuple[float, float]) -> float:
    """``value`` moved ``weight`` of the way to ``target`` in log space, within ``bounds``."""
    low, high = bounds
    target = min(max(target, low / 10), high * 10)
    return min(max(value * math.exp(weight * math.log(target / value)), low), high)


@dataclass
class _Job:
    work: Work
    learn: bool = True            # whether its time teaches the estimates (upscales do, previews not)
    started: float | None = None  # perf_counter() when a worker took it


class JobPool:
    def __init__(self, workers: int, max_queue: int) -> None:
        self.workers = workers
        self.max_queue = max_queue
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sr-infer")
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}  # admitted: waiting or running
        self._ids = itertools.count()
        self._finished = itertools.count(1)  # jobs that ran, whatever their end
        self._running = 0
        self._completed = 0
        self._cancelled = 0
        self.model = WorkModel()

    @property
    def capacity(self) -> int:
        return self.workers + self.max_queue

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "workers": self.workers, "max_queue": self.max_queue, "running": self._running,
                "waiting": len(self._jobs) - self._running, "completed": self._completed,
                "cancelled": self._cancelled,
            }

    def estimate(self, work: Work) -> float:
        """Seconds one job of ``work`` is expected to run."""
        return self.model.predict(work)

    def schedule(self) -> tuple[float, float]:
        """(seconds until the first admitted job ends, seconds until a job admitted now would start):
        the admitted jobs played forward on the workers, FIFO, at their predicted times.

        The first is when a slot frees, what a refused client should wait (Retry-After); the whole
        queue's drain over-stated it 10-15x (issue 54, row F). A running job that overran its
        prediction counts as about to end.
        """
        now = time.perf_counter()
        with self._lock:
            jobs = list(self._jobs.values())  # admission order: the order the executor starts them
        running = [max(self.model.predict(j.work) - (now - j.started), 0.0)
                   for j in jobs if j.started is not None]
        free = sorted(running + [0.0] * max(self.workers - len(running), 0))
        ends = list(running)
        for job in jobs:
            if job.started is None:
                start = heapq.heappop(free)
                end = start + self.model.predict(job.work)
                ends.append(end)
                heapq.heappush(free, end)
        return (min(ends) if ends else 0.0), (free[0] if free else 0.0)

    def retry_after(self) -> int:
        first_end, _ = self.schedule()
        return min(MAX_RETRY_AFTER_S, max(1, math.ceil(first_end)))

    def check_room(self, work: Work, timeout: float) -> None:
        """Raise :class:`QueueFullError` when a job of ``work`` admitted now would not finish within
        ``timeout``: the wait for a worker plus its own predicted time. Such a job used to be
        admitted and end as a 504 after holding a slot (issue 54, row F: 2 of 8 near the limit);
        its Retry-After is when the wait will have shrunk enough."""
        _, start_delay = self.schedule()
        own = self.model.predict(work)
        if start_delay > 0 and start_delay + own > timeout:
            wait = start_delay + own - timeout
            raise QueueFullError(min(MAX_RETRY_AFTER_S, max(1, math.ceil(wait))),
                                 reason=f"the jobs ahead need about {start_delay:.0f} s and this one "
                                        f"{own:.0f} s, over the time limit of {timeout:g} s")

    async def run(
        self, fn: Callable[..., T], *args: object, timeout: float, work: Work | None = None,
        stop: threading.Event | None = None, disconnected: Callable[[], Awaitable[bool]] | None = None,
        learn: bool = True,
    ) -> T:
        """Run ``fn(*args)`` in a worker thread and await it, within ``timeout`` seconds.

        ``stop`` is set when the request gives up (timeout, ``disconnected()`` returned True, or this
        coroutine was cancelled); ``fn`` should poll it and return early. ``work``: what the job
        costs, for Retry-After and learning. ``learn=False``: a job whose time must not teach the model.
        """
        stop = stop if stop is not None else threading.Event()
        job = _Job(work or Work(), learn)
        with self._lock:
            full = len(self._jobs) >= self.capacity
        if full:
            raise QueueFullError(self.retry_after(), self.capacity)
        if work is not None:
            self.check_room(work, timeout)
        with self._lock:
            full = len(self._jobs) >= self.capacity  # again: another request may have taken the slot
            if not full:
                job_id = next(self._ids)
                self._jobs[job_id] = job
        if full:
            raise QueueFullError(self.retry_after(), self.capacity)
        try:
            future = self._executor.submit(self._call, job, stop, fn, args)
        except RuntimeError:  # executor shut down (server stopping)
            self._release(job_id)
            raise QueueFullError(self.retry_after()) from None
        future.add_done_callback(lambda _f: self._release(job_id))
        waiter = asyncio.wrap_future(future)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    break
                poll = min(left, DISCONNECT_POLL_S) if disconnected is not None else left
                done, _ = await asyncio.wait({waiter}, timeout=poll)
                if done:
                    return waiter.result()
                if disconnected is not None and await disconnected():
                    self._give_up(stop, future, waiter)
                    raise ClientGoneError("the client disconnected; its job was cancelled")
        except asyncio.CancelledError:  # the request's task was cancelled (client gone, shutdown)
            self._give_up(stop, future, waiter)
            raise
        self._give_up(stop, future, waiter)
        raise JobTimeoutError(timeout)

    @staticmethod
    def _give_up(stop: threading.Event, future: Future, waiter: asyncio.Future) -> None:
        stop.set()        # a running job stops at its next network forward
        future.cancel()   # a job still waiting never starts
        waiter.cancel()   # nobody will read its result or exception

    def _call(self, job: _Job, stop: threading.Event, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._lock:
            self._running += 1
            job.started = time.perf_counter()
        ok = False
        result = None
        try:
            result = fn(*args)
            ok = True
            return result
        finally:
            elapsed = time.perf_counter() - job.started
            with self._lock:
                self._running -= 1
                if ok:
                    self._completed += 1
                    if job.learn:
                        self.model.learn(job.work, elapsed, getattr(result, "network_s", None))
                elif stop.is_set():
                    self._cancelled += 1
                    if job.learn:
                        self.model.overran(job.work, elapsed)
                else:
                    self._completed += 1  # failed on its input: no measure of the work
            nth = next(self._finished)
            if job.work.io_mp >= TRIM_AFTER_IO_MP or nth % TRIM_EVERY_JOBS == 0:
                return_freed_memory()  # outside the lock: the other workers go on meanwhile

    def _release(self, job_id: int) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
