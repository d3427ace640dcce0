"""An upload's job (:class:`UpscaleJob`, under this server's :class:`JobLimits`; :func:`upload_job`
builds it) and its work, planned before any of it is done: :func:`plan_work` (the engine's own plan,
against the server's output and work limits) and :class:`Planner` (also against the time limit, at
the work model's predicted seconds).

A request is planned once, at admission (:meth:`Planner.admit`), on the size its header gives, and
again only when the decoded size differs (an orientation the header read missed):
:func:`sr.service.running.run_job`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sr.request import UpscaleRequest

from .work_model import Work, WorkModel

if TYPE_CHECKING:  # annotations only
    from sr.inference import Upscaler

    from .catalog import ModelCatalog
    from .intake import Intake
    from .settings import Settings


@dataclass(frozen=True)
class JobLimits:
    """This server's limits on a job (None: none)."""

    max_pixels: int                        # input pixels
    max_output_pixels: int | None = None
    max_work_pixels: int | None = None
    timeout_s: float | None = None         # the request's time limit: the decode's wall-clock allowance too

    @classmethod
    def of(cls, settings: Settings) -> JobLimits:
        return cls(settings.max_pixels, settings.max_output_pixels, settings.max_work_pixels,
                   settings.timeout_s)


@dataclass
class UpscaleJob:
    """One upload's job: its bytes, what it asks for (validated), and this server's limits on it."""

    data: bytes
    request: UpscaleRequest  # size, format and quality, tta, budget map (model/denoise/look: the engine's)
    limits: JobLimits
    budget_k_max: float | None = None  # heat-map scale: the model's k_max, so maps compare across images
    keep_budget_map: bool = False  # also return the budget map's colour levels with the image
    stop: threading.Event = field(default_factory=threading.Event)  # set when the request gives up
    # (width, height) the admitted plan is for: the header's; the decode plans again only if it differs
    planned_size: tuple[int, int] | None = None
    submitted: float = field(default_factory=time.perf_counter)
    # network cost per output pixel of the model and of its pre model, relative to the model the
    # work model is calibrated on (ModelCatalog.cost): 1.0 for the weights folder's families
    cost: tuple[float, float] = (1.0, 0.0)
    teaches: bool = True  # whether its time teaches the work model (ModelCatalog.calibrated)

    def should_stop(self) -> bool:
        """Whether to give up now: polled between stages, by the engine and by the decoder."""
        return self.stop.is_set()


def upload_job(catalog: ModelCatalog, data: bytes, family: str, asked: UpscaleRequest, keep_budget_map: bool,
               limits: JobLimits) -> UpscaleJob:
    """An upload's job for ``asked`` on the catalogue's ``family``, under ``limits``: its heat-map
    scale, its network cost and whether its time teaches the work model, as the catalogue says."""
    k_max = catalog.budget_k_max(family) if asked.budget_map or keep_budget_map else None
    return UpscaleJob(data=data, request=asked, limits=limits, budget_k_max=k_max,
                      keep_budget_map=keep_budget_map, cost=catalog.cost(family, asked.pre),
                      teaches=catalog.calibrated(family, asked.pre))


class WorkLimitError(ValueError):
    """The request asks for more output pixels, work or time than the server allows (-> 422)."""


def plan_work(engine: Upscaler, width: int, height: int, job: UpscaleJob) -> tuple[tuple[int, int], Work]:
    """((out_w, out_h), the job's :class:`Work`) for ``job`` on a width x height input, without doing
    any work: the engine's own plan (:meth:`sr.inference.Upscaler.plan`), its tiling included.

    The limit is on work pixels: the pixels the network produces, summed over its passes (a pass on
    a bigger image costs more), times 8 with tta. Raises :class:`WorkLimitError` over the job's
    limits, and ``UpscaleError`` for arguments the engine refuses.
    """
    plan = engine.plan(height, width, job.request)
    tta = job.request.tta
    out_h, out_w = plan.out_size
    asked = f"{out_w}x{out_h} output"
    limits = job.limits
    if limits.max_output_pixels is not None and out_w * out_h > limits.max_output_pixels:
        raise WorkLimitError(
            f"{asked} is {out_w * out_h / 1e6:.1f} megapixels, over this server's limit of "
            f"{limits.max_output_pixels / 1e6:.1f} (SR_MAX_OUTPUT_PIXELS); ask for a smaller scale, "
            "outscale, width or height")
    if limits.max_work_pixels is not None and plan.work_pixels > limits.max_work_pixels:
        how = f"passes x{' x'.join(map(str, plan.passes))}" + (", x8 for tta" if tta else "")
        raise WorkLimitError(
            f"{asked} needs {plan.work_pixels / 1e6:.1f} megapixels of network work ({how}), over this "
            f"server's limit of {limits.max_work_pixels / 1e6:.1f} (SR_MAX_WORK_PIXELS); "
            "ask for a smaller output"
            + (" or turn tta off" if tta else ""))
    model_cost, pre_cost = job.cost
    pre_pixels = width * height * (8 if tta else 1) if job.request.pre else 0  # its overlaps: the model's
    tiled = (plan.tiled_pixels - pre_pixels) * model_cost + pre_pixels * pre_cost
    work = Work(forwards=plan.tiles, tiled_mp=tiled / 1e6, io_mp=(width * height + out_w * out_h) / 1e6)
    return (out_w, out_h), work


@dataclass(frozen=True)
class Planner:
    """Plans a job's work and refuses it over the limits, or when the work model predicts it cannot
    finish within the time limit: it would hold a worker for the whole limit, then time out."""

    model: WorkModel   # the job pool's: its predictions are the pool's
    timeout_s: float

    async def admit(self, engine: Upscaler, job: UpscaleJob, intake: Intake) -> Work:
        """The job's predicted work, or the error that refuses it before any work: the header gives
        the size (read in the sandbox, on ``intake``'s lane of the upload's size; its decode errors
        as the sandbox raises them), the engine's plan the output, passes and predicted time."""
        probe = await intake.probe(job.data, job.limits.max_pixels)
        job.planned_size = (probe.width, probe.height)
        return self.plan(engine, job, probe.width, probe.height)

    def plan(self, engine: Upscaler, job: UpscaleJob, width: int, height: int) -> Work:
        """The job's work on a width x height input; :class:`WorkLimitError` over the limits or the
        time limit."""
        (out_w, out_h), work = plan_work(engine, width, height, job)
        predicted = self.model.predict(work)
        if predicted > self.timeout_s:
            tta = job.request.tta
            raise WorkLimitError(
                f"{out_w}x{out_h} output{' with tta' if tta else ''} needs about {predicted:.0f} s of work "
                f"at this server's measured rate ({work.forwards} network forwards, {work.tiled_mp:.1f} MP),"
                f" over its time limit of {self.timeout_s:g} s (SR_TIMEOUT_S); ask for a smaller output"
                + (" or turn tta off" if tta else ""))
        return work
