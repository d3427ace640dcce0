"""JobPool: bounded admission, time limits, jobs told to stop when their request gives up, Retry-After."""

from __future__ import annotations

import asyncio
import math
import os
import platform
import subprocess
import sys
import threading
import time

import pytest

from sr.service.jobs import ClientGoneError, JobPool, JobTimeoutError, QueueFullError
from sr.service.work_model import PRIOR_SECONDS_PER_JOB, PRIOR_SECONDS_PER_MP, Work


def _blocker() -> tuple[threading.Event, threading.Event, object]:
    started, release = threading.Event(), threading.Event()

    def job(value: int) -> int:
        started.set()
        assert release.wait(10)
        return value * 2

    return started, release, job


def test_runs_jobs_off_the_event_loop_and_returns_results() -> None:
    pool = JobPool(workers=2, max_queue=0)

    async def main() -> list[int]:
        return await asyncio.gather(*(pool.run(lambda v=v: v + 1, timeout=5) for v in range(2)))

    assert asyncio.run(main()) == [1, 2]
    assert pool.stats()["completed"] == 2 and pool.stats()["running"] == 0
    pool.shutdown()


def test_queue_full_is_refused_at_once_with_retry_after() -> None:
    pool = JobPool(workers=1, max_queue=1)
    started, release, job = _blocker()

    async def main() -> None:
        first = asyncio.ensure_future(pool.run(job, 1, timeout=10))
        second = asyncio.ensure_future(pool.run(job, 2, timeout=10))  # waits in the queue
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        assert pool.stats() == {"workers": 1, "max_queue": 1, "running": 1, "waiting": 1, "completed": 0,
                                "cancelled": 0}
        with pytest.raises(QueueFullError) as info:
            await pool.run(job, 3, timeout=10)
        assert info.value.retry_after >= 1
        release.set()
        assert await first == 2 and await second == 4

    asyncio.run(main())
    pool.shutdown()


def test_job_that_ignores_its_stop_event_keeps_its_slot_until_it_really_ends() -> None:
    pool = JobPool(workers=1, max_queue=0)
    started, release, job = _blocker()

    async def main() -> None:
        with pytest.raises(JobTimeoutError, match="0.1 s"):
            await pool.run(job, 1, timeout=0.1)
        assert started.is_set()
        # This job never looks at its stop event: the pool stays full, no pile-up behind it.
        with pytest.raises(QueueFullError) as refused:
            await pool.run(lambda: 0, timeout=1)
        release.set()
        for _ in range(100):
            if pool.stats()["running"] == 0 and pool.stats()["waiting"] == 0:
                break
            await asyncio.sleep(0.02)
        # the freed slot is held for the refused client's place in line, which comes when told
        await asyncio.sleep(refused.value.retry_after)
        assert await pool.run(lambda: 5, timeout=1) == 5

    asyncio.run(main())
    pool.shutdown()


def test_waiting_job_that_times_out_is_dropped_from_the_queue() -> None:
    pool = JobPool(workers=1, max_queue=1)
    started, release, job = _blocker()
    ran = threading.Event()

    async def main() -> None:
        first = asyncio.ensure_future(pool.run(job, 1, timeout=10))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        with pytest.raises(JobTimeoutError):
            await pool.run(ran.set, timeout=0.1)
        assert pool.stats()["waiting"] == 0  # its slot is free again at once
        release.set()
        await first

    asyncio.run(main())
    pool.shutdown()
    assert not ran.is_set()


def _stoppable() -> tuple[threading.Event, threading.Event, object]:
    """A long job that polls its stop event, as the engine does before every network forward."""
    started, stop = threading.Event(), threading.Event()

    def job() -> str:
        started.set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if stop.is_set():
                raise RuntimeError("cancelled")
            time.sleep(0.01)
        return "ran to the end"

    return started, stop, job


async def _wait_idle(pool: JobPool, seconds: float = 2.0) -> float:
    t0 = time.monotonic()
    while pool.stats()["running"] or pool.stats()["waiting"]:
        assert time.monotonic() - t0 < seconds, f"the pool is still busy: {pool.stats()}"
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


def test_timed_out_job_is_told_to_stop_and_frees_its_slot() -> None:
    pool = JobPool(workers=1, max_queue=0)
    started, stop, job = _stoppable()

    async def main() -> None:
        t0 = time.monotonic()
        with pytest.raises(JobTimeoutError):
            await pool.run(job, timeout=0.2, stop=stop)
        assert started.is_set() and stop.is_set()
        await _wait_idle(pool)
        assert time.monotonic() - t0 < 2  # not the job's 20 s
        assert pool.stats()["cancelled"] == 1 and pool.stats()["completed"] == 0
        assert await pool.run(lambda: 5, timeout=1) == 5

    asyncio.run(main())
    pool.shutdown()


def test_disconnected_client_stops_its_job() -> None:
    pool = JobPool(workers=1, max_queue=1)
    started, stop, job = _stoppable()
    gone = threading.Event()

    async def disconnected() -> bool:
        return gone.is_set()

    async def main() -> None:
        running = asyncio.ensure_future(pool.run(job, timeout=30, stop=stop, disconnected=disconnected))
        waiting_stop = threading.Event()
        waiting = asyncio.ensure_future(pool.run(lambda: "never", timeout=30, stop=waiting_stop,
                                                 disconnected=disconnected))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        gone.set()
        for task in (running, waiting):
            with pytest.raises(ClientGoneError):
                await asyncio.wait_for(task, 2)
        assert stop.is_set() and waiting_stop.is_set()
        await _wait_idle(pool)
        assert pool.stats()["cancelled"] == 1  # the waiting one never started

    asyncio.run(main())
    pool.shutdown()


def test_cancelled_request_task_stops_its_job() -> None:
    pool = JobPool(workers=1, max_queue=0)
    started, stop, job = _stoppable()

    async def main() -> None:
        task = asyncio.ensure_future(pool.run(job, timeout=30, stop=stop))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stop.is_set()
        await _wait_idle(pool)

    asyncio.run(main())
    pool.shutdown()


def test_retry_after_is_the_time_until_the_first_slot_frees() -> None:
    pool = JobPool(workers=2, max_queue=3)
    release = threading.Event()
    work = Work(tiled_mp=8.0)

    async def main() -> None:
        jobs = [asyncio.ensure_future(pool.run(release.wait, 10, timeout=60, work=work)) for _ in range(5)]
        while pool.stats()["running"] < 2:
            await asyncio.sleep(0.01)
        with pytest.raises(QueueFullError, match="taken by 5 jobs") as info:
            await pool.run(release.wait, timeout=30, work=work)
        one = PRIOR_SECONDS_PER_JOB + PRIOR_SECONDS_PER_MP * 8.0  # ~10 s each, nothing measured yet
        # Not the whole queue's drain (five jobs on two workers, ~25 s): the first running job ends
        # in ~10 s, and its slot is the one a refused client can take (a soak's row F).
        assert abs(info.value.retry_after - one) <= 1.5
        release.set()
        await asyncio.gather(*jobs)

    asyncio.run(main())
    pool.shutdown()


def test_retry_after_learns_the_rate_and_predicts_when_a_slot_frees() -> None:
    """Jobs here run at 0.1x the priors' fixed cost, 0.2x their per-forward and 0.3x their
    per-megapixel cost: after a calibration and a few small jobs, Retry-After for a full queue is
    within a factor 2 of how long it really takes for a slot to free (the first job to end)."""
    pool = JobPool(workers=1, max_queue=2)

    def seconds(work: Work, fixed_too: bool = True) -> float:
        fixed, forwards, per_mp = pool.model.parts(work)
        return 0.1 * fixed * fixed_too + 0.2 * forwards + 0.3 * per_mp

    def job(work: Work) -> None:
        time.sleep(seconds(work))

    square, strip = Work(forwards=1, tiled_mp=1.0), Work(forwards=10, tiled_mp=0.01)
    pool.model.calibrate((square, seconds(square, False)), (strip, seconds(strip, False)))
    assert (round(pool.model.forward_factor, 3), round(pool.model.mp_factor, 3)) == (0.2, 0.3)

    async def main() -> None:
        for w in [Work(forwards=1, tiled_mp=0.01), Work(forwards=1, tiled_mp=0.3)] * 3:
            await pool.run(job, w, timeout=10, work=w)
        assert 0.05 < pool.model.fixed_factor < 0.3 and 0.15 < pool.model.mp_factor < 0.6
        works = [Work(forwards=30, tiled_mp=3.0), Work(forwards=2, tiled_mp=3.0), Work(forwards=200)]
        queued = [asyncio.ensure_future(pool.run(job, w, timeout=30, work=w)) for w in works]
        while not pool.stats()["running"]:
            await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        with pytest.raises(QueueFullError) as info:
            await pool.run(job, works[0], timeout=1, work=works[0])
        await asyncio.wait(queued, return_when=asyncio.FIRST_COMPLETED)
        freed = time.perf_counter() - t0
        await asyncio.gather(*queued)
        assert freed / 2 <= info.value.retry_after <= freed * 2, (info.value.retry_after, freed)

    asyncio.run(main())
    pool.shutdown()


# The machine of the load tests: the priors' rates times these factors, times a slowdown for the load.
TRUE_FACTORS = (0.5, 0.2, 0.3)  # fixed, per forward, per megapixel
SMALL = Work(forwards=1, tiled_mp=0.016, io_mp=0.02)      # a 64x64 upload, x2
BIG = Work(forwards=9, tiled_mp=16.0, io_mp=20.0)          # a 2048^2 one
STRIP = Work(forwards=4040, tiled_mp=16.2, io_mp=10.0)     # a 1x2,000,000 one


def _timed(model, work: Work, slowdown: float) -> tuple[float, float]:
    """(seconds, network seconds) of a job of ``work`` on that machine."""
    parts = model.parts(work)
    fixed, forwards, per_mp = (f * p * slowdown for f, p in zip(TRUE_FACTORS, parts, strict=True))
    return fixed + forwards + per_mp, forwards + per_mp


def _calibrated():
    from sr.service.work_model import WorkModel

    model = WorkModel()
    square, strip = Work(forwards=1, tiled_mp=1.0), Work(forwards=10, tiled_mp=0.01)
    model.calibrate((square, _timed(model, square, 1.0)[1]), (strip, _timed(model, strip, 1.0)[1]))
    return model


def test_a_loaded_machine_seen_in_small_jobs_slows_the_prediction_of_a_big_one() -> None:
    """A soak: the machine got 3x slower (trainings started), mostly small jobs ran, and a
    big job, whose megapixel factor only big jobs could teach, was predicted at the start-up speed,
    admitted, and ran into a 504. The load, learnt from every job's network seconds, carries the
    slowdown over (with the margin of a job far bigger than the teachers); the small jobs' fixed cost
    does not leak into the network's factors."""
    from sr.service.work_model import EXTRAPOLATION_MARGIN

    model = _calibrated()
    for _ in range(20):  # idle
        model.learn(SMALL, *_timed(model, SMALL, 1.0))
    assert 0.95 < model.load < 1.05 and abs(model.fixed_factor / TRUE_FACTORS[0] - 1) < 0.05
    for work in (BIG, STRIP):
        assert 1.0 <= model.predict(work) / _timed(model, work, 1.0)[0] <= EXTRAPOLATION_MARGIN + 0.05
    for _ in range(8):  # then 3x slower, seen in small jobs only
        model.learn(SMALL, *_timed(model, SMALL, 3.0))
    assert 2.7 < model.load < 3.3
    for work in (BIG, STRIP):
        assert 0.95 <= model.predict(work) / _timed(model, work, 3.0)[0] <= EXTRAPOLATION_MARGIN + 0.1
    model.learn(BIG, *_timed(model, BIG, 3.0))  # one big job done: its size is taught, no margin
    assert abs(model.predict(BIG) / _timed(model, BIG, 3.0)[0] - 1) < 0.1
    for _ in range(8):  # the load goes away again
        model.learn(SMALL, *_timed(model, SMALL, 1.0))
    assert abs(model.predict(BIG) / _timed(model, BIG, 1.0)[0] - 1) < 0.1


def test_small_jobs_faster_than_predicted_do_not_talk_a_far_bigger_one_under_the_limit() -> None:
    """The soak's 504s: 64x64 uploads ran at 0.7x their predicted network time and 1536^2 ones at
    1.04x (asa-base x2, one thread, measured), so hundreds of small jobs set the load to 0.7 and a
    67-MP job was predicted 30% short, admitted, and ran past the limit. A job far bigger than the
    recent teachers is predicted at no less than the start-up speed; once jobs of its size have run,
    their own speed counts, and the memory of them fades as small jobs follow."""
    from sr.service.work_model import EXTRAPOLATE_ABOVE, TAUGHT_DECAY

    model = _calibrated()
    for _ in range(300):
        model.learn(SMALL, *_timed(model, SMALL, 0.7))
    assert 0.65 < model.load < 0.75
    true_big = _timed(model, BIG, 1.04)[0]
    assert model.predict(BIG) >= true_big  # refused as over the limit rather than run to a 504
    assert abs(model.predict(SMALL) / _timed(model, SMALL, 0.7)[0] - 1) < 0.05  # small ones unchanged
    model.learn(BIG, *_timed(model, BIG, 1.04))
    assert model.predict(BIG) < true_big  # taught: the learnt load (between 0.7 and 1.04) again
    fade = math.ceil(math.log(1 / EXTRAPOLATE_ABOVE) / math.log(TAUGHT_DECAY)) + 1
    for _ in range(fade):
        model.learn(SMALL, *_timed(model, SMALL, 0.7))
    assert model.predict(BIG) >= true_big  # forgotten: extrapolated again


def test_a_job_stopped_at_the_limit_after_overrunning_raises_the_load_for_a_while() -> None:
    model = _calibrated()
    model.forward_factor /= 4  # a start-up measurement 4x too optimistic about forwards
    for _ in range(10):
        model.learn(SMALL, *_timed(model, SMALL, 1.0))
    predicted, load = model.predict(STRIP), model.load
    model.overran(STRIP, predicted / 2)  # stopped before its prediction: says nothing
    assert model.predict(STRIP) == predicted
    model.overran(STRIP, 2 * predicted)  # stopped at 2x its prediction, unfinished
    assert model.predict(STRIP) >= 1.2 * predicted
    for _ in range(10):  # not for good: completed jobs bring the load back (no lasting 422s)
        model.learn(SMALL, *_timed(model, SMALL, 1.0))
    assert abs(model.load / load - 1) < 0.05


def test_a_job_that_would_overrun_on_the_loaded_machine_gets_503_not_admission() -> None:
    """The same slowdown in the pool: with a job running, a second one whose start-up-speed
    prediction fits in the time limit but whose loaded one does not is refused (503 + Retry-After)
    instead of being admitted to a 504."""
    pool = JobPool(workers=1, max_queue=2, model=_calibrated())
    model = pool.model
    for slowdown in [1.0] * 10 + [3.0] * 8:
        model.learn(SMALL, *_timed(model, SMALL, slowdown))
    model.learn(BIG, *_timed(model, BIG, 3.0))  # a big job has run: its size is taught
    idle, loaded = _timed(model, BIG, 1.0)[0], _timed(model, BIG, 3.0)[0]
    # One loaded job fits, two in a row do not (the second would 504); at the idle speed they did.
    timeout = 1.2 * loaded
    assert 2 * idle < timeout < 2 * loaded
    release = threading.Event()

    async def main() -> None:
        first = asyncio.ensure_future(pool.run(release.wait, 10, timeout=timeout, work=BIG))
        while not pool.stats()["running"]:
            await asyncio.sleep(0.01)
        with pytest.raises(QueueFullError, match="over the time limit") as info:
            await pool.run(release.wait, 10, timeout=timeout, work=BIG)
        # Retry-After: when the wait will have shrunk enough, on the loaded prediction.
        assert abs(info.value.retry_after - (2 * loaded - timeout)) <= 0.2 * loaded + 1
        release.set()
        await first

    asyncio.run(main())
    pool.shutdown()


def test_freed_memory_is_returned_after_big_jobs_only(monkeypatch) -> None:
    """A job that decoded or encoded >= 1 MP hands the allocator's free pages back (the soak's RSS
    creep); small jobs, most of the traffic, do not pay for the trim. And the trim itself works:
    where glibc has it, freed arrays leave the process's RSS."""
    import sr.service.jobs as jobs

    trims: list[int] = []
    monkeypatch.setattr(jobs, "return_freed_memory", lambda: trims.append(1))
    pool = JobPool(workers=1, max_queue=1)

    async def main() -> None:
        await pool.run(lambda: None, timeout=10, work=Work(forwards=1, tiled_mp=0.02, io_mp=0.02))
        assert trims == []
        await pool.run(lambda: None, timeout=10, work=Work(forwards=4, tiled_mp=4.0, io_mp=5.0))
        assert trims == [1]
        with pytest.raises(ValueError):  # a job failing on its input still frees what it held
            await pool.run(_raise_value_error, timeout=10, work=Work(forwards=4, tiled_mp=4.0, io_mp=5.0))
        assert trims == [1, 1]
        for _ in range(jobs.TRIM_EVERY_JOBS - 3):  # and every TRIM_EVERY_JOBS jobs, small ones too
            await pool.run(lambda: None, timeout=10, work=Work(forwards=1, tiled_mp=0.02, io_mp=0.02))
        assert trims == [1, 1, 1]

    asyncio.run(main())
    pool.shutdown()


def _raise_value_error() -> None:
    raise ValueError("bad input")


_BODIES = """
import sys
from sr.service.memory import fix_mmap_threshold
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
if sys.argv[1] == "fix":
    assert fix_mmap_threshold()
keep = []
r0 = rss()
for _ in range(30):
    body = bytearray(19 * 2**20)  # an upload body, touched
    keep.append(bytearray(64 * 1024))  # something small that outlives it, above it on the heap
    del body
print(rss() - r0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists("/proc/self/statm")
                    or "glibc" not in " ".join(platform.libc_ver()), reason="glibc's malloc on Linux")
def test_a_pinned_mmap_threshold_gives_big_freed_buffers_back() -> None:
    """glibc raises its mmap threshold to each big block freed, so later 19-MB bodies come from the
    heap and stay held behind small blocks; the service pins the threshold at start-up."""
    held = {}
    for mode in ("default", "fix"):
        out = subprocess.run([sys.executable, "-c", _BODIES, mode], capture_output=True, text=True,
                             check=True)
        held[mode] = float(out.stdout.strip())
    assert held["fix"] < 8, held
    assert held["default"] > held["fix"] + 10, held  # the mechanism the pin exists for


def test_the_network_seconds_a_result_reports_teach_the_load() -> None:
    """A job's result reports its network seconds (``network_seconds``): they set the load; a job
    without them teaches only the factor of its prediction's dominant part."""
    work = Work(forwards=1, tiled_mp=1.0)
    taught, untaught = JobPool(workers=1, max_queue=0), JobPool(workers=1, max_queue=0)

    async def main() -> None:
        assert await taught.run(lambda: 0.5, timeout=5, work=work, network_seconds=float) == 0.5
        await untaught.run(lambda: 0.5, timeout=5, work=work)

    asyncio.run(main())
    network = sum(taught.model.parts(work)[1:])  # the network's seconds at the priors' rates
    assert taught.model.load == pytest.approx(0.5 / network)  # the first job: taken as it is
    assert untaught.model.load == 1.0 and untaught.model.mp_factor < 1.0
    taught.shutdown()
    untaught.shutdown()
