"""A bounded pool for blocking inference jobs, run off the event loop.

At most ``workers`` jobs run and at most ``max_queue`` wait; a job beyond that is refused at once
(:class:`QueueFullError`, the caller answers 503 + Retry-After) instead of piling up. Each job has a
time limit counted from admission, queue wait included (:class:`JobTimeoutError` -> 504).

A running torch call cannot be interrupted, so a job that times out keeps its slot until it really
ends: the pool never holds more than ``workers + max_queue`` jobs, whatever the clients do.
A job still waiting when it times out (or its client goes away) is dropped from the queue.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class QueueFullError(RuntimeError):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"server busy: all workers and queue slots are taken; retry in {retry_after} s")
        self.retry_after = retry_after


class JobTimeoutError(TimeoutError):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"request took longer than the server's limit of {seconds:g} s")
        self.seconds = seconds


class JobPool:
    def __init__(self, workers: int, max_queue: int) -> None:
        self.workers = workers
        self.max_queue = max_queue
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sr-infer")
        self._lock = threading.Lock()
        self._admitted = 0
        self._running = 0
        self._avg_seconds = 1.0  # running mean of job time, for Retry-After
        self._completed = 0

    @property
    def capacity(self) -> int:
        return self.workers + self.max_queue

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "workers": self.workers, "max_queue": self.max_queue, "running": self._running,
                "waiting": self._admitted - self._running, "completed": self._completed,
            }

    def retry_after(self) -> int:
        """Seconds until a slot is likely free: queued work spread over the workers."""
        with self._lock:
            backlog = max(self._admitted - self.workers + 1, 1)
            return max(1, math.ceil(self._avg_seconds * backlog / self.workers))

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float) -> T:
        """Run ``fn(*args)`` in a worker thread and await it, within ``timeout`` seconds."""
        with self._lock:
            full = self._admitted >= self.capacity
            if not full:
                self._admitted += 1
        if full:
            raise QueueFullError(self.retry_after())
        try:
            future = self._executor.submit(self._call, fn, args)
        except RuntimeError:  # executor shut down (server stopping)
            self._release(None)
            raise QueueFullError(self.retry_after()) from None
        future.add_done_callback(self._release)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except asyncio.TimeoutError:
            future.cancel()  # only drops a job that has not started; a running one ends on its own
            raise JobTimeoutError(timeout) from None
        except asyncio.CancelledError:  # client went away
            future.cancel()
            raise

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._lock:
            self._running += 1
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self._running -= 1
                self._completed += 1
                self._avg_seconds = 0.8 * self._avg_seconds + 0.2 * elapsed

    def _release(self, _future: Future | None) -> None:
        with self._lock:
            self._admitted -= 1

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
