"""A bounded pool for blocking inference jobs, run off the event loop.

At most ``workers`` jobs run and at most ``max_queue`` wait; a job beyond that is refused at once
(:class:`QueueFullError`, the caller answers 503 + Retry-After) instead of piling up. Waiting jobs
start by turns of client addresses, and a refused client gets a place in line whose slot is held
for it (:mod:`sr.service.queue_line`). Each job has a time limit counted from admission, queue wait
included (:class:`JobTimeoutError` -> 504).

A job whose request gives up (time limit passed, client gone) is told to stop: its ``stop`` event is
set, and the engine, which polls it before every network forward (each tile, ensemble view and
pass), abandons the work there (:class:`sr.inference.UpscaleCancelled`). The slot is freed when the
worker reaches that point, within one forward, so the pool never holds more than
``workers + max_queue`` jobs, whatever the clients do. A job still waiting is dropped from the queue.

Time is predicted by one :class:`~sr.service.work_model.WorkModel` from each job's
:class:`~sr.service.work_model.Work`, and taught by the jobs that complete: their time, and the
network seconds their result reports (``network_seconds``). The same prediction refuses a job that
would start too late to finish in time (503) and gives ``Retry-After``: the predicted time until a
slot frees (:meth:`JobPool.schedule`).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import math
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .memory import return_freed_memory
from .queue_line import MAX_RESERVATIONS_PER_SLOT, Line
from .work_model import Work, WorkModel

T = TypeVar("T")

MAX_RETRY_AFTER_S = 3600
# After a job that decoded or encoded this many megapixels, and after every TRIM_EVERY_JOBS jobs,
# freed memory goes back to the system: glibc keeps freed blocks in its per-thread arenas (the
# event loop's, the workers', the thread pool's). In the service's soaks the server's RSS crept
# 458 -> 625 MB with big strips among the jobs, and 337 -> 380 MB (+13%, linearly) with small jobs
# only, while the same requests through the app in one thread held flat: no Python object leaked.
# A strip upscaled four times in one process held +29 MB without malloc_trim, +0 with.
TRIM_AFTER_IO_MP = 1.0
TRIM_EVERY_JOBS = 256
DISCONNECT_POLL_S = 0.25
# The address of the client whose request this task serves: set by service.intake.UploadAdmission
# for each upload, read by the intake lanes and the job pool, which serve addresses in turn. A
# context variable, so that the layers between (routes, the domain) need not pass it along.
CURRENT_CLIENT: contextvars.ContextVar[str] = contextvars.ContextVar("sr_client", default="")


class JobStopped(RuntimeError):
    """The request gave up (timeout, client gone) between the job's stages."""


class QueueFullError(RuntimeError):
    def __init__(self, retry_after: int, ahead: int | None = None, reason: str | None = None,
                 place: int | None = None) -> None:
        jobs = f" by {ahead} jobs" if ahead is not None else ""
        why = reason or f"all workers and queue slots are taken{jobs}"
        line = f"; you are number {place} in line" if place is not None and place > 1 else ""
        super().__init__(f"server busy: {why}{line}; retry in {retry_after} s (the predicted time for "
                         f"{'your' if line else 'a'} slot to free)")
        self.retry_after = retry_after
        self.ahead = ahead
        self.place = place


class JobTimeoutError(TimeoutError):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"request took longer than the server's limit of {seconds:g} s")
        self.seconds = seconds


class ClientGoneError(ConnectionError):
    """The client disconnected while its job waited or ran; the job was told to stop."""


@dataclass
class _Job:
    work: Work
    learn: bool = True            # whether its time teaches the estimates (upscales do, previews not)
    started: float | None = None  # the pool's clock() when a worker took it
    client: str = ""              # who asked (an address): the waiting jobs start by turns of clients
    seq: int = 0                  # admission order, among one client's jobs and to break ties
    call: Callable[[], Any] | None = None
    # the network seconds the job's result reports (what teaches the load); None: its time alone
    network_seconds: Callable[[Any], float] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    future: Future = field(default_factory=Future)


class JobPool:
    """At most ``workers`` jobs running and ``max_queue`` waiting; waiting jobs start by turns of
    clients (one address cannot hold the queue: a client's next job waits behind every other
    client's first), and a refused client gets a place in line.

    The line (:class:`~sr.service.queue_line.Line`): a client refused because every slot is taken
    is told to come back when the slot for its place frees (Retry-After: the n-th end in the
    admitted jobs' schedule for the n-th in line), and a freed slot is held for the places ahead of a
    newcomer until they come back or lapse. A slot is held even while the pool is idle: the request
    that found it idle is, as often as not, the next one of a client whose job just ended.

    ``model``: the work model to predict with (default: a new one, at the priors).
    """

    def __init__(self, workers: int, max_queue: int, model: WorkModel | None = None) -> None:
        self.workers = workers
        self.max_queue = max_queue
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: dict[int, _Job] = {}  # admitted: waiting or running
        self._waiting: list[_Job] = []    # admitted, not started
        self._turns: dict[str, int] = {}  # jobs started per client (turns; see _pick)
        self._round = 0                   # the turns of the client whose job started last
        self._line = Line(MAX_RESERVATIONS_PER_SLOT * (workers + max_queue))
        self._ids = itertools.count()
        self._finished = itertools.count(1)  # jobs that ran, whatever their end
        self._running = 0
        self._completed = 0
        self._cancelled = 0
        self._closed = False
        self.clock = time.perf_counter  # seconds; the line's tests play time forward
        self.model = model if model is not None else WorkModel()
        self._threads = [threading.Thread(target=self._work, name=f"sr-infer_{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

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
        the admitted jobs played forward on the workers, in the order they will start, at their
        predicted times.

        The first is when a slot frees, what a refused client should wait (Retry-After); the whole
        queue's drain over-stated it 10-15x. A running job that overran its
        prediction counts as about to end.
        """
        with self._lock:
            ends, start = self._schedule_locked(self.clock())
        return (ends[0] if ends else 0.0), start

    def _schedule_locked(self, now: float) -> tuple[list[float], float]:
        """(every admitted job's predicted end from now, sorted; when a job admitted now would start)."""
        running = [max(self.model.predict(j.work) - (now - j.started), 0.0)
                   for j in self._jobs.values() if j.started is not None]
        free = sorted(running + [0.0] * max(self.workers - len(running), 0))
        ends = list(running)
        turns, last = dict(self._turns), self._round
        waiting = list(self._waiting)
        while waiting:
            job = self._pick(waiting, turns)
            waiting.remove(job)
            last = turns[job.client] = turns.get(job.client, last) + 1
            start = heapq.heappop(free)
            end = start + self.model.predict(job.work)
            ends.append(end)
            heapq.heappush(free, end)
        return sorted(ends), (free[0] if free else 0.0)

    @staticmethod
    def _pick(waiting: list[_Job], turns: dict[str, int]) -> _Job:
        """The waiting job to start next: its client's turns fewest, then the earliest admitted."""
        return min(waiting, key=lambda j: (turns.get(j.client, 0), j.seq))

    def retry_after(self, place: int = 1) -> int:
        """Seconds until the slot for the ``place``-th client in line frees (1: the first to free)."""
        with self._lock:
            return self._retry_after_locked(place, self.clock())

    def _retry_after_locked(self, place: int, now: float) -> int:
        ends, _ = self._schedule_locked(now)
        slots = [0.0] * max(self.capacity - len(self._jobs), 0) + ends  # held slots free now
        if place <= len(slots):
            wait = slots[place - 1]
        else:  # past every admitted job: the slots turn over at the jobs' mean pace
            mean = sum(self.model.predict(j.work) for j in self._jobs.values()) / max(len(self._jobs), 1)
            wait = (slots[-1] if slots else 0.0) + (place - len(slots)) * mean / self.workers
        return min(MAX_RETRY_AFTER_S, max(1, math.ceil(wait)))

    def _admit_or_refuse_locked(self, now: float, take: bool, client: str) -> None:
        """Raise :class:`QueueFullError` (with a place in line) unless a slot is free for this request;
        ``take``: the request is admitted now, and takes the place in line it came for."""
        claim, ahead = self._line.find(now, client)  # ahead: the places before this request's
        if self.capacity - len(self._jobs) > ahead:
            if claim is not None and take:
                self._line.take(claim)
            return
        place = ahead + 1
        retry = self._retry_after_locked(place, now)
        self._line.hold(claim, ahead, now, retry, client)
        raise QueueFullError(retry, len(self._jobs), place=place)

    def check_room(self, work: Work, timeout: float) -> None:
        """Raise :class:`QueueFullError` when a job of ``work`` admitted now would not finish within
        ``timeout``: the wait for a worker plus its own predicted time. Such a job used to be
        admitted and end as a 504 after holding a slot (2 of 8 near the limit);
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
        learn: bool = True, network_seconds: Callable[[T], float] | None = None, client: str | None = None,
    ) -> T:
        """Run ``fn(*args)`` in a worker thread and await it, within ``timeout`` seconds.

        ``stop`` is set when the request gives up (timeout, ``disconnected()`` returned True, or this
        coroutine was cancelled); ``fn`` should poll it and return early. ``work``: what the job
        costs, for Retry-After and learning. ``learn=False``: a job whose time must not teach the model.
        ``network_seconds``: the seconds of network work the job's result reports (they teach the
        load); None: its time teaches the part that dominated its prediction.
        ``client``: who asks (an address), for the turns; by default the request's (:data:`CURRENT_CLIENT`).
        """
        client = CURRENT_CLIENT.get() if client is None else client
        stop = stop if stop is not None else threading.Event()
        job = _Job(work or Work(), learn, client=client, call=lambda: fn(*args), stop=stop,
                   network_seconds=network_seconds)
        with self._lock:
            if self._closed:
                raise QueueFullError(1, reason="the server is stopping")
            self._admit_or_refuse_locked(self.clock(), take=False, client=client)
        if work is not None:
            self.check_room(work, timeout)
        with self._lock:
            self._admit_or_refuse_locked(self.clock(), take=True, client=client)  # again: another came?
            job_id = job.seq = next(self._ids)
            self._jobs[job_id] = job
            self._turns[client] = max(self._turns.get(client, 0), self._round)
            self._waiting.append(job)
            self._wake.notify()
        future = job.future
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
                    _give_up(stop, future, waiter)
                    raise ClientGoneError("the client disconnected; its job was cancelled")
        except asyncio.CancelledError:  # the request's task was cancelled (client gone, shutdown)
            _give_up(stop, future, waiter)
            raise
        _give_up(stop, future, waiter)
        raise JobTimeoutError(timeout)

    def _work(self) -> None:
        """A worker thread: start the next waiting job by turns, until the pool shuts down."""
        while True:
            with self._wake:
                while not self._waiting and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                job = self._pick(self._waiting, self._turns)
                self._waiting.remove(job)
                self._round = self._turns[job.client] = self._turns.get(job.client, self._round) + 1
            if not job.future.set_running_or_notify_cancel():
                continue  # given up while it waited: released by its future's callback
            try:
                result = self._call(job, job.stop, job.call)
            except BaseException as e:  # the job's own error, for its awaiting request
                job.future.set_exception(e)
            else:
                job.future.set_result(result)

    def _call(self, job: _Job, stop: threading.Event, call: Callable[[], T] | None) -> T:
        assert call is not None
        with self._lock:
            self._running += 1
            job.started = self.clock()
        t0 = time.perf_counter()  # what the job really took teaches the model, whatever the clock
        ok = False
        result = None
        try:
            result = call()
            ok = True
            return result
        finally:
            elapsed = time.perf_counter() - t0
            with self._lock:
                self._running -= 1
                if ok:
                    self._completed += 1
                    if job.learn:
                        network_s = job.network_seconds(result) if job.network_seconds else None
                        self.model.learn(job.work, elapsed, network_s)
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
            job = self._jobs.pop(job_id, None)
            if job is None:
                return
            if job in self._waiting:
                self._waiting.remove(job)
            if not any(j.client == job.client for j in self._jobs.values()):
                self._turns.pop(job.client, None)  # back later: it starts at the current round

    def shutdown(self) -> None:
        with self._wake:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            self._wake.notify_all()
        for job in waiting:
            job.future.cancel()


def _give_up(stop: threading.Event, future: Future, waiter: asyncio.Future) -> None:
    stop.set()        # a running job stops at its next network forward
    future.cancel()   # a job still waiting never starts
    waiter.cancel()   # nobody will read its result or exception
