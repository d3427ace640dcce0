"""An admitted upscale job's run in a worker of the job pool (:func:`run_admitted`):
:class:`~sr.service.planning.UpscaleJob` in, decode (in the sandbox) -> engine -> encode, timed per
stage (:func:`run_job`), a typed :class:`JobResult` out."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .budget_maps import heatmap_png
from .formats import output_format
from .jobs import ClientGoneError, JobStopped

if TYPE_CHECKING:  # annotations only
    import numpy as np

    from sr.inference import Upscaler

    from .jobs import JobPool
    from .planning import Planner, UpscaleJob
    from .sandbox import Sandbox
    from .work_model import Work

log = logging.getLogger("sr.service")


class NoBudgetMapError(ValueError):
    """A budget map asked of a model without adaptive attention blocks (-> 422)."""


@dataclass(frozen=True)
class StageTimes:
    """Milliseconds a job spent in each stage, in order (the answer's Server-Timing)."""

    queue_ms: float
    decode_ms: float
    upscale_ms: float
    encode_ms: float

    def by_stage(self) -> dict[str, float]:
        return {"queue": self.queue_ms, "decode": self.decode_ms, "upscale": self.upscale_ms,
                "encode": self.encode_ms}


@dataclass(frozen=True)
class JobResult:
    body: bytes
    fmt: str                  # png | jpg | webp
    model: str
    scale: int
    size: tuple[int, int]     # output (width, height)
    times: StageTimes
    choice: str = ""          # model "auto": what it chose and why, e.g. "auto: photo (JPEG, quality ~72)"
    budget_levels: np.ndarray | None = None  # keep_budget_map: uint8 (H, W) heat-map levels

    def network_seconds(self) -> float:
        """Seconds the engine ran: what teaches the job pool the network's current speed."""
        return self.times.upscale_ms / 1e3


async def run_admitted(pool: JobPool, engine: Upscaler, job: UpscaleJob, work: Work, decoder: Sandbox,
                       planner: Planner, disconnected: Callable[[], Awaitable[bool]]) -> JobResult | None:
    """The admitted job's result from a worker of ``pool`` (decoded in ``decoder``), within the
    planner's time limit, or None when the client went away (the job is then cancelled); the job
    pool's, sandbox's or job's errors as raised."""
    try:
        # a models-folder model's work is the descriptor's estimate: its time would teach the work
        # model, calibrated on the default model, a load that is not the machine's
        return await pool.run(run_job, engine, job, decoder, planner, timeout=planner.timeout_s, work=work,
                              stop=job.stop, disconnected=disconnected, learn=job.teaches,
                              network_seconds=JobResult.network_seconds)
    except ClientGoneError:
        log.info("client gone: job cancelled")
        return None


def run_job(engine: Upscaler, job: UpscaleJob, decoder: Sandbox, planner: Planner) -> JobResult:
    """Decode (in ``decoder``, the sandbox), upscale, encode: the admitted job. Its work was planned
    once at admission; ``planner`` plans it again only where the decoded size differs from the
    header's, so an orientation the header read missed cannot buy a job past the time limit."""
    from sr.io import encode_image

    t0 = time.perf_counter()
    _check_stop(job)
    img = decoder.decode(job.data, max_pixels=job.limits.max_pixels, wall_s=job.limits.timeout_s,
                         should_stop=job.should_stop)
    if (img.width, img.height) != job.planned_size:
        planner.plan(engine, job, img.width, img.height)
    _check_stop(job)
    t1 = time.perf_counter()
    # source: the upload's bytes, from which model "auto" tells lossy from lossless; quantize: the
    # output as 8/16-bit samples, what the encoder takes, without a full-size float32 copy
    asked = job.request
    res = engine.run(img, asked, budget_map=job.keep_budget_map, should_stop=job.should_stop, source=job.data,
                     quantize=True)
    _check_stop(job)
    t2 = time.perf_counter()
    if asked.budget_map:
        if res.budget_map is None:
            raise NoBudgetMapError(f"model {res.model} has no adaptive attention blocks: no budget map")
        fmt, body = "png", heatmap_png(res.budget_map, job.budget_k_max)
    else:
        fmt = output_format(asked.format, img.format)
        body = encode_image(res.image, format=fmt, quality=asked.quality)
    t3 = time.perf_counter()
    levels = None
    if job.keep_budget_map and not asked.budget_map and res.budget_map is not None:
        from sr.inference.heatmap import budget_levels

        levels = budget_levels(res.budget_map, job.budget_k_max)
    out = res.image
    return JobResult(
        body=body, fmt=fmt, model=res.model, scale=res.scale, size=(out.width, out.height),
        choice=res.choice.describe() if res.choice is not None else "", budget_levels=levels,
        times=StageTimes(queue_ms=(t0 - job.submitted) * 1e3, decode_ms=(t1 - t0) * 1e3,
                         upscale_ms=(t2 - t1) * 1e3, encode_ms=(t3 - t2) * 1e3),
    )


def _check_stop(job: UpscaleJob) -> None:
    if job.should_stop():
        raise JobStopped("job stopped: the request gave up")
