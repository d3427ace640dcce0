"""A bounded pool for blocking inference jobs, run off the event loop.

At most ``workers`` jobs run and at most ``max_queue`` wait; a job beyond that is refused at once
(:class:`QueueFullError`, the caller answers 503 + Retry-After) instead of piling up. Each job has a
time limit counted from admission, queue wait included (:class:`JobTimeoutError` -> 504).

A job whose request gives up (time limit passed, client gone) is told to stop: its ``stop`` event is
set, and the engine, which polls it before every network forward (each tile, ensemble view and
pass), abandons the work there (:class:`sr.inference.UpscaleCancelled`). The slot is freed when the
worker reaches that point, within one forward, so the pool never holds more than
``workers + max_queue`` jobs, whatever the clients do. A job still waiting is dropped from the queue.

``Retry-After`` is the time the admitted work needs to drain: each job declares its cost (work
megapixels), and the pool keeps moving averages of seconds per megapixel and of the fixed cost per
job, learnt from the jobs that completed.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# Priors until jobs have been measured: asa-base x2 on 2 CPU cores makes ~0.8 output MP/s.
PRIOR_SECONDS_PER_MP = 1.25
PRIOR_SECONDS_PER_JOB = 0.05
# Jobs smaller than this teach the per-job overhead; larger ones the seconds per megapixel.
SMALL_JOB_MP = 0.25
EMA_WEIGHT = 0.2
MAX_RETRY_AFTER_S = 3600
DISCONNECT_POLL_S = 0.25


class QueueFullError(RuntimeError):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"server busy: all workers and queue slots are taken; retry in {retry_after} s")
        self.retry_after = retry_after


class JobTimeoutError(TimeoutError):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"request took longer than the server's limit of {seconds:g} s")
        self.seconds = seconds


class ClientGoneError(ConnectionError):
    """The client disconnected while its job waited or ran; the job was told to stop."""


@dataclass
class _Job:
    cost_mp: float
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
        self._running = 0
        self._completed = 0
        self._cancelled = 0
        self._seconds_per_mp = PRIOR_SECONDS_PER_MP
        self._seconds_per_job = PRIOR_SECONDS_PER_JOB

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

    def estimate(self, cost_mp: float) -> float:
        """Seconds one job of ``cost_mp`` work megapixels is expected to run."""
        return self._seconds_per_job + self._seconds_per_mp * cost_mp

    def retry_after(self) -> int:
        """Seconds until the admitted work has drained: what is left of each job, over the workers."""
        now = time.perf_counter()
        with self._lock:
            left = 0.0
            for job in self._jobs.values():
                expected = self.estimate(job.cost_mp)
                left += max(expected - (now - job.started), 0.0) if job.started is not None else expected
        return min(MAX_RETRY_AFTER_S, max(1, math.ceil(left / self.workers)))

    async def run(
        self, fn: Callable[..., T], *args: Any, timeout: float, cost_mp: float = 0.0,
        stop: threading.Event | None = None, disconnected: Callable[[], Awaitable[bool]] | None = None,
        learn: bool = True,
    ) -> T:
        """Run ``fn(*args)`` in a worker thread and await it, within ``timeout`` seconds.

        ``stop`` is set when the request gives up (timeout, ``disconnected()`` returned True, or this
        coroutine was cancelled); ``fn`` should poll it and return early. ``learn=False``: a job
        unlike an upscale, whose time must not change the estimates.
        """
        stop = stop if stop is not None else threading.Event()
        job = _Job(max(float(cost_mp), 0.0), learn)
        with self._lock:
            full = len(self._jobs) >= self.capacity
            if not full:
                job_id = next(self._ids)
                self._jobs[job_id] = job
        if full:
            raise QueueFullError(self.retry_after())
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
                        self._learn(job.cost_mp, elapsed)
                elif stop.is_set():
                    self._cancelled += 1
                else:
                    self._completed += 1  # failed on its input: no measure of the work

    def _learn(self, cost_mp: float, elapsed: float) -> None:
        if cost_mp < SMALL_JOB_MP:
            self._seconds_per_job += EMA_WEIGHT * (elapsed - self._seconds_per_job)
        else:
            rate = max(elapsed - self._seconds_per_job, 0.0) / cost_mp
            self._seconds_per_mp += EMA_WEIGHT * (rate - self._seconds_per_mp)

    def _release(self, job_id: int) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
