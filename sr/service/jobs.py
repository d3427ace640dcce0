"""A bounded pool for blocking inference jobs, run off the event loop.

At most ``workers`` jobs run and at most ``max_queue`` wait; a job beyond that is refused at once
(:class:`QueueFullError`, the caller answers 503 + Retry-After) instead of piling up. Waiting jobs
start by turns of client addresses, and a refused client gets a place in line whose slot is held
for it (:class:`JobPool`). Each job has a
time limit counted from admission, queue wait included (:class:`JobTimeoutError` -> 504).

A job whose request gives up (time limit passed, client gone) is told to stop: its ``stop`` event is
set, and the engine, which polls it before every network forward (each tile, ensemble view and
pass), abandons the work there (:class:`sr.inference.UpscaleCancelled`). The slot is freed when the
worker reaches that point, within one forward, so the pool never holds more than
``workers + max_queue`` jobs, whatever the clients do. A job still waiting is dropped from the queue.

Time is predicted by one :class:`WorkModel`: each job declares its :class:`Work` (network
forwards, the megapixels its tiles output, the megapixels decoded and encoded); seconds are a
per-item cost measured on this machine times a factor learnt from the jobs that completed, times
the machine's current load, a moving average over the last jobs of all kinds. The same
prediction refuses a job that cannot finish within the time limit (the app's 422), refuses one that
would start too late to finish in time (503), and gives ``Retry-After``: the predicted time until
a slot frees (:meth:`JobPool.schedule`).
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import ctypes.util
import heapq
import itertools
import math
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
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
# it and ran to a 504 (a soak: 18 of 298 requests).
LOAD_WEIGHT = 1 / 3
LOAD_RANGE = (0.05, 20.0)
# The load is a ratio measured on the jobs that ran, and it does not carry to a far bigger job: a
# 64x64 upload ran at 0.7x its predicted network time, a 1536^2 one at 1.04x (asa-base x2, one
# thread, idle), so a stream of small jobs talked the load down to 0.7 and a 67-MP job was predicted
# at 22 s, admitted under a 30-s limit and ran into a 504 (a soak: 21 of 25). A job more
# than EXTRAPOLATE_ABOVE times the network work of the biggest recent teacher is predicted at no
# less than the start-up speed, with a margin; the teacher's size fades by TAUGHT_DECAY per job.
EXTRAPOLATE_ABOVE = 4.0
EXTRAPOLATION_MARGIN = 1.25
TAUGHT_DECAY = 0.98
FACTOR_RANGE = (0.02, 50.0)       # one odd job (a swapped-out page, a cold cache) moves it only so far
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
# for each upload, read by the intake lanes and the job pool, which serve addresses in turn (issue
# 72). A context variable, so that the layers between (routes, pipeline) need not pass it along.
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
    down until a 67-megapixel job looked like 30 s (a soak: admitted, it ran to the limit).
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
    started: float | None = None  # the pool's clock() when a worker took it
    client: str = ""              # who asked (an address): the waiting jobs start by turns of clients
    seq: int = 0                  # admission order, among one client's jobs and to break ties
    call: Callable[[], Any] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    future: Future = field(default_factory=Future)


@dataclass
class _Reservation:
    """A refused client's place in line: the slot it was told to come back for is held for it."""

    due: float      # the pool's clock() it was told to come back at (now + Retry-After)
    expires: float  # when its place lapses: a client that never came back holds nothing
    client: str     # its address: only a request from there takes the place


# A refused client's place is held until this long after the time it was told to come back (a
# retry also uploads and has its header read before it reaches the pool), or a quarter of its
# wait, whichever is longer.
RESERVATION_GRACE_S = 3.0
MAX_RESERVATIONS_PER_SLOT = 4  # the line is bounded: past it, a refusal holds no place


class JobPool:
    """At most ``workers`` jobs running and ``max_queue`` waiting; waiting jobs start by turns of
    clients (one address cannot hold the queue: a client's next job waits behind every other
    client's first), and a refused client gets a place in line.

    The line: a client refused because every slot is taken is told to come back when the slot for
    its place frees (Retry-After: the n-th end in the admitted jobs' schedule for the n-th in line),
    and a freed slot is held for the places ahead of a newcomer until they come back or lapse
    (:data:`RESERVATION_GRACE_S`). Without it, the client whose job just ended (or any newcomer)
    took each freed slot, and 8 retrying clients waited 3-15x their Retry-After. Places are not
    tied to a connection: the first request from the place's address at or after its time takes
    it (clients that obey Retry-After come when told). A slot is held even while the pool is idle:
    the request that found it idle is, as often as not, the next one of a client whose job just
    ended.
    """

    def __init__(self, workers: int, max_queue: int) -> None:
        self.workers = workers
        self.max_queue = max_queue
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: dict[int, _Job] = {}  # admitted: waiting or running
        self._waiting: list[_Job] = []    # admitted, not started
        self._turns: dict[str, int] = {}  # jobs started per client (turns; see _pick)
        self._round = 0                   # the turns of the client whose job started last
        self._line: list[_Reservation] = []
        self._ids = itertools.count()
        self._finished = itertools.count(1)  # jobs that ran, whatever their end
        self._running = 0
        self._completed = 0
        self._cancelled = 0
        self._closed = False
        self.clock = time.perf_counter  # seconds; the line's tests play time forward
        self.model = WorkModel()
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
        self._line = [r for r in self._line if r.expires > now]
        # Not before its time: the next request of a client whose job just ended comes at once, and
        # with even 0.5 s of leeway it took the place of one still waiting (a 4.3x wait in a test).
        claim = next((i for i, r in enumerate(self._line) if r.due <= now and r.client == client), None)
        ahead = claim if claim is not None else self._place_for(client)  # places before this request's
        free = self.capacity - len(self._jobs)
        if free > ahead:
            if claim is not None and take:
                del self._line[claim]
            return
        place = ahead + 1
        retry = self._retry_after_locked(place, now)
        held = _Reservation(now + retry, now + retry + max(RESERVATION_GRACE_S, retry / 4), client)
        if claim is not None:
            self._line[claim] = held  # came back before its slot freed: keeps its place
        elif len(self._line) < MAX_RESERVATIONS_PER_SLOT * self.capacity:
            self._line.insert(ahead, held)
        raise QueueFullError(retry, len(self._jobs), place=place)

    def _place_for(self, client: str) -> int:
        """Where a new place of ``client`` goes in line: after every address's places up to as many as
        this one holds already, so addresses take turns in line too. One address's third refusal
        goes behind another's first (whose promised time stays true); from one address alone, last."""
        rank = sum(1 for r in self._line if r.client == client)
        seen: dict[str, int] = {}
        at = 0
        for i, r in enumerate(self._line):
            seen[r.client] = seen.get(r.client, 0) + 1
            if seen[r.client] <= rank + 1:
                at = i + 1
        return at

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
        learn: bool = True, client: str | None = None,
    ) -> T:
        """Run ``fn(*args)`` in a worker thread and await it, within ``timeout`` seconds.

        ``stop`` is set when the request gives up (timeout, ``disconnected()`` returned True, or this
        coroutine was cancelled); ``fn`` should poll it and return early. ``work``: what the job
        costs, for Retry-After and learning. ``learn=False``: a job whose time must not teach the model.
        ``client``: who asks (an address), for the turns; by default the request's (:data:`CURRENT_CLIENT`).
        """
        client = CURRENT_CLIENT.get() if client is None else client
        stop = stop if stop is not None else threading.Event()
        job = _Job(work or Work(), learn, client=client, call=lambda: fn(*args), stop=stop)
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
