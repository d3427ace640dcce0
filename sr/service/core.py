"""The service's domain core: one :class:`Service` per app, built by :func:`build_service`.

A request is admitted once, after the header probe (the engine's plan of its work, against the
server's limits and time limit), and planned again only when the decoded size differs from the
probed one (an orientation the header read missed). Refusals are domain errors; the routes never
see a try/except ladder (their HTTP answers: :mod:`sr.service.routes.errors`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sr.io import DecodedImage, ImageDecodeError
from sr.request import UpscaleRequest

from .errors import upload_error
from .hub import ModelHub
from .intake import AdmissionState, Intake
from .jobs import ClientGoneError, JobPool
from .pipeline import BudgetMapStore, JobRequest, JobResult, WorkLimitError, plan_work, run_job
from .sandbox import Limits, Sandbox
from .settings import Settings
from .work_model import Work

if TYPE_CHECKING:  # annotations only
    from collections.abc import Iterator

    from sr.inference import Upscaler

log = logging.getLogger("sr.service")

# Timed at start-up on the warmed model: a square (one forward, mostly per-megapixel cost; ~0.1 s
# for asa-base x2 on 2 idle cores) and a strip of thin tiles (mostly per-forward cost, ~0.15 s).
CALIBRATION_SQUARE = 128
CALIBRATION_STRIP = 2048


@contextmanager
def decode_errors_of(data: bytes) -> Iterator[None]:
    """A decode failure of ``data`` as the client should hear it (:func:`upload_error`)."""
    try:
        yield
    except ImageDecodeError as e:
        raise upload_error(e, data) from None


@dataclass
class Service:
    settings: Settings
    hub: ModelHub
    pool: JobPool
    budget_maps: BudgetMapStore
    intake: Intake        # header reads and pre-checks, sandboxed, on a small and a large lane
    decoder: Sandbox      # decodes, sandboxed, one process per job worker
    admission: AdmissionState

    def job(self, data: bytes, family: str, asked: UpscaleRequest, keep_budget_map: bool) -> JobRequest:
        """An upload's job for ``asked``, under this server's limits."""
        s = self.settings
        catalog = self.hub.catalog
        k_max = catalog.budget_k_max(family) if asked.budget_map or keep_budget_map else None
        return JobRequest(data=data, request=asked, max_pixels=s.max_pixels, budget_k_max=k_max,
                          keep_budget_map=keep_budget_map, max_output_pixels=s.max_output_pixels,
                          max_work_pixels=s.max_work_pixels, cost=catalog.cost(family, asked.pre),
                          teaches=catalog.calibrated(family, asked.pre))

    async def admit(self, engine: Upscaler, job: JobRequest) -> Work:
        """The job's predicted work, or the domain error that refuses it before any work: the header
        gives the size (read in the sandbox, on the intake lane of the upload's size), the engine's
        plan the output, passes and predicted time."""
        with decode_errors_of(job.data):
            probe = await self.intake.probe(job.data, self.settings.max_pixels)
        job.planned_size = (probe.width, probe.height)
        return self.planned_work(engine, job, probe.width, probe.height)

    def planned_work(self, engine: Upscaler, job: JobRequest, width: int, height: int) -> Work:
        """The job's work on a width x height input, refused over the limits or the time limit."""
        (out_w, out_h), work = plan_work(engine, width, height, job)
        self.check_time(work, (out_w, out_h), job.request.tta)
        return work

    def check_time(self, work: Work, out: tuple[int, int], tta: bool) -> None:
        """:class:`WorkLimitError` for a job that cannot finish within the time limit: it would hold
        a worker for the whole limit, then time out."""
        settings = self.settings
        predicted = self.pool.estimate(work)
        if predicted > settings.timeout_s:
            raise WorkLimitError(
                f"{out[0]}x{out[1]} output{' with tta' if tta else ''} needs about {predicted:.0f} s of work "
                f"at this server's measured rate ({work.forwards} network forwards, {work.tiled_mp:.1f} MP),"
                f" over its time limit of {settings.timeout_s:g} s (SR_TIMEOUT_S); ask for a smaller output"
                + (" or turn tta off" if tta else ""))

    async def run(self, engine: Upscaler, job: JobRequest, work: Work,
                  disconnected: Callable[[], Awaitable[bool]]) -> JobResult | None:
        """The admitted job's result from a worker (decoded in the sandbox), or None when the client
        went away (the job is then cancelled); the job pool's, sandbox's or job's errors as raised."""
        job.decode = self.decode(engine, job)
        try:
            with decode_errors_of(job.data):
                # a models-folder model's work is the descriptor's estimate: its time would teach the
                # work model, calibrated on the default model, a load that is not the machine's
                return await self.pool.run(run_job, engine, job, timeout=self.settings.timeout_s, work=work,
                                           stop=job.stop, disconnected=disconnected,
                                           learn=job.teaches, network_seconds=JobResult.network_seconds)
        except ClientGoneError:
            log.info("client gone: job cancelled")
            return None

    def decode(self, engine: Upscaler, job: JobRequest) -> Callable[..., DecodedImage]:
        """The job's decode: in the sandbox; the work is planned again only when the decoded size
        differs from the admitted one (an orientation the header read missed cannot buy a job past
        the time limit)."""
        def decode(data: bytes, max_pixels: int | None) -> DecodedImage:
            img = self.decoder.decode(data, max_pixels=max_pixels, wall_s=self.settings.timeout_s,
                                      should_stop=job.should_stop)
            if (img.width, img.height) != job.planned_size:
                self.planned_work(engine, job, img.width, img.height)
            return img

        return decode

    async def preview(self, data: bytes,
                      disconnected: Callable[[], Awaitable[bool]]) -> tuple[bytes, int, int] | None:
        """(PNG of the decoded upload, its width, height), the error that refuses it, or None when
        the client went away. Decoded and encoded in the sandbox: a 16-bit 4096^2 RGBA upload never
        becomes float pixels in the server's own memory (row G: +1 GB), only a PNG."""
        settings = self.settings
        stop = threading.Event()
        try:
            with decode_errors_of(data):
                probe = await self.intake.probe(data, settings.max_pixels)
                preview = functools.partial(self.decoder.preview, data, max_pixels=settings.max_pixels,
                                            wall_s=settings.timeout_s, should_stop=stop.is_set)
                work = Work(io_mp=2 * probe.width * probe.height / 1e6)  # decode + encode: no network
                body = await self.pool.run(preview, timeout=settings.timeout_s, work=work, stop=stop,
                                           disconnected=disconnected, learn=False)
        except ClientGoneError:
            return None
        return body, probe.width, probe.height

    def calibrate(self, engine: Upscaler) -> None:
        """The work model's rates on this machine, for this model: time two upscales."""
        import numpy as np

        scale = min(engine.scales)
        rng = np.random.default_rng(0)
        timed = []
        for h, w in ((CALIBRATION_SQUARE, CALIBRATION_SQUARE), (1, CALIBRATION_STRIP)):
            sample = DecodedImage(pixels=rng.random((h, w, 3), dtype=np.float32), format="PNG", mode="RGB")
            job = JobRequest(data=b"", request=UpscaleRequest(scale=scale), max_pixels=h * w)
            _, work = plan_work(engine, w, h, job)
            start = time.perf_counter()
            engine.upscale(sample, scale=scale)
            timed.append((dataclasses.replace(work, io_mp=0.0), time.perf_counter() - start))
        model = self.pool.model
        model.calibrate(*timed)
        log.info("work model: x%.2f the priors' seconds per megapixel, x%.2f per forward (%s)",
                 model.mp_factor, model.forward_factor,
                 ", ".join(f"{w.forwards} forwards in {t:.2f} s" for w, t in timed))

    def start(self) -> None:
        """Start the sandboxes, then load the default model in the background (``/healthz`` answers
        at once, ``/readyz`` says 503 until loaded). The decoder processes start with the model's
        load (python + numpy + Pillow: seconds on a loaded machine), not on the first request; the
        calibration waits for them, since their start would slow its timings."""
        self.intake.start()
        self.decoder.start()

        threading.Thread(target=self._load, name="sr-load", daemon=True).start()

    def _load(self) -> None:
        """The default model loaded and warmed, then (with preload) the work model calibrated on it
        once the sandboxes are up; the hub says ready after both, or failed with the error."""
        try:
            engine = self.hub.load_default()
            if self.settings.preload:
                self.intake.wait_ready()
                self.decoder.wait_ready()
                self.calibrate(engine)
        except Exception as e:  # noqa: BLE001 - any failure is reported by /readyz, not raised
            self.hub.failed(e)
        else:
            self.hub.loaded(engine)

    def close(self) -> None:
        self.pool.shutdown()
        self.intake.close()
        self.decoder.close()


def build_service(settings: Settings, admission: AdmissionState) -> Service:
    """The service for ``settings`` (nothing started: :meth:`Service.start`)."""
    memory = settings.sandbox_memory_mb * 2**20
    return Service(settings=settings, hub=ModelHub(settings),
                   pool=JobPool(settings.workers, settings.max_queue), budget_maps=BudgetMapStore(),
                   intake=Intake(memory, settings.probe_cpu_s, settings.probe_wall_s),
                   decoder=Sandbox(settings.workers, name="decoder",
                                   limits=Limits(memory, settings.decode_cpu_s, settings.timeout_s)),
                   admission=admission)
