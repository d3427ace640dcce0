"""JobPool: bounded admission, time limits, slots held by jobs that outlive their request."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.jobs import JobPool, JobTimeoutError, QueueFullError


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
        assert pool.stats() == {"workers": 1, "max_queue": 1, "running": 1, "waiting": 1, "completed": 0}
        with pytest.raises(QueueFullError) as info:
            await pool.run(job, 3, timeout=10)
        assert info.value.retry_after >= 1
        release.set()
        assert await first == 2 and await second == 4

    asyncio.run(main())
    pool.shutdown()


def test_timed_out_job_keeps_its_slot_until_it_really_ends() -> None:
    pool = JobPool(workers=1, max_queue=0)
    started, release, job = _blocker()

    async def main() -> None:
        with pytest.raises(JobTimeoutError, match="0.1 s"):
            await pool.run(job, 1, timeout=0.1)
        assert started.is_set()
        # The torch call cannot be interrupted: the pool is still full, no pile-up behind it.
        with pytest.raises(QueueFullError):
            await pool.run(lambda: 0, timeout=1)
        release.set()
        for _ in range(100):
            if pool.stats()["running"] == 0 and pool.stats()["waiting"] == 0:
                break
            await asyncio.sleep(0.02)
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
