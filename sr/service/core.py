"""The service's domain: one :class:`Service` per app, built by :func:`build_service`. A route calls one
of its methods per request and sends back the :class:`~sr.service.answer.Answer` it returns.

An upscale, as ``sr upscale`` does it (:meth:`Service.upscale`): the form -> one
:class:`sr.request.UpscaleRequest` (:mod:`sr.service.form`) -> its engine (:mod:`sr.service.hub`) ->
the upload's bytes (:mod:`sr.service.upload`) -> admitted once, after the header probe (the engine's
plan of its work, against the server's limits and time limit: :mod:`sr.service.planning`) -> run
in a worker of the job pool (:mod:`sr.service.running`, planned again only when the decoded size
differs from the probed one) -> the answer and its headers (:mod:`sr.service.answer`). Refusals are
domain errors (:mod:`sr.service.errors` and the modules' own); their HTTP answers are one table,
:mod:`sr.service.routes.errors`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sr.io import DecodedImage
from sr.request import UpscaleRequest

from .answer import NO_SNIFF_NO_STORE, Answer, result_headers
from .budget_maps import BudgetMapStore
from .form import UpscaleForm, form_request
from .formats import mime_types
from .hub import ModelHub
from .intake import AdmissionState, Intake
from .jobs import ClientGoneError, JobPool
from .planning import JobLimits, Planner, UpscaleJob, plan_work, upload_job
from .running import run_admitted
from .sandbox import Limits, Sandbox
from .settings import Settings
from .upload import Upload, decode_errors_of, read_upload
from .work_model import Work

if TYPE_CHECKING:  # annotations only
    from sr.inference import Upscaler

log = logging.getLogger("sr.service")

# Timed at start-up on the warmed model: a square (one forward, mostly per-megapixel cost; ~0.1 s
# for asa-base x2 on 2 idle cores) and a strip of thin tiles (mostly per-forward cost, ~0.15 s).
CALIBRATION_SQUARE = 128
CALIBRATION_STRIP = 2048
MIME = mime_types()


@dataclass(frozen=True)
class UpscaleCall:
    """One POST /v1/upscale as the domain gets it: the form's values, the uploaded file (not read
    yet), and how to tell that the client went away."""

    form: UpscaleForm
    upload: Upload
    disconnected: Callable[[], Awaitable[bool]]


@dataclass
class Service:
    settings: Settings
    hub: ModelHub
    pool: JobPool
    planner: Planner      # the job pool's predictions, against the limits and the time limit
    budget_maps: BudgetMapStore
    intake: Intake        # header reads and pre-checks, sandboxed, on a small and a large lane
    decoder: Sandbox      # decodes, sandboxed, one process per job worker
    admission: AdmissionState

    async def upscale(self, call: UpscaleCall) -> Answer | None:
        """The upscaled image (or its budget map), or None when the client went away (its job is
        then cancelled); the domain error that refuses it, in this order: the form, the engine (a
        scale it lacks, before the upload is read, as the CLI checks it), the upload, the plan of
        its work, the job pool, the decode and the engine's run."""
        start = time.perf_counter()
        family, asked = form_request(self.hub.catalog, call.form)
        engine = self.hub.engine_for(family, asked)
        data = await read_upload(call.upload, self.settings.max_upload_bytes)
        with decode_errors_of(data):  # the header's and the decode's failures, as the client hears them
            job = upload_job(self.hub.catalog, data, family, asked, call.form.keep_budget_map,
                             JobLimits.of(self.settings))
            work = await self.planner.admit(engine, job, self.intake)
            result = await run_admitted(self.pool, engine, job, work, self.decoder, self.planner,
                                        call.disconnected)
        if result is None:
            return None
        headers = result_headers(result, job, call.upload.filename, (time.perf_counter() - start) * 1e3)
        if result.budget_levels is not None:
            map_id = self.budget_maps.put(result.budget_levels, job.budget_k_max)
            if map_id is not None:
                headers["X-Budget-Map-Id"] = map_id
        return Answer(result.body, MIME[result.fmt], headers)

    async def preview(self, upload: Upload, disconnected: Callable[[], Awaitable[bool]]) -> Answer | None:
        """The decoded upload as an 8-bit PNG, the error that refuses it, or None when the client
        went away. Decoded and encoded in the sandbox: a 16-bit 4096^2 RGBA upload never becomes
        float pixels in the server's own memory (row G: +1 GB), only a PNG."""
        settings = self.settings
        data = await read_upload(upload, settings.max_upload_bytes)
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
        return Answer(body, "image/png",
                      {"X-Image-Size": f"{probe.width}x{probe.height}", **NO_SNIFF_NO_STORE})

    def calibrate(self, engine: Upscaler) -> None:
        """The work model's rates on this machine, for this model: time two upscales."""
        import numpy as np

        scale = min(engine.scales)
        rng = np.random.default_rng(0)
        timed = []
        for h, w in ((CALIBRATION_SQUARE, CALIBRATION_SQUARE), (1, CALIBRATION_STRIP)):
            sample = DecodedImage(pixels=rng.random((h, w, 3), dtype=np.float32), format="PNG", mode="RGB")
            job = UpscaleJob(data=b"", request=UpscaleRequest(scale=scale),
                             limits=JobLimits(max_pixels=h * w))
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
    pool = JobPool(settings.workers, settings.max_queue)
    return Service(settings=settings, hub=ModelHub(settings), pool=pool,
                   planner=Planner(pool.model, settings.timeout_s), budget_maps=BudgetMapStore(),
                   intake=Intake(memory, settings.probe_cpu_s, settings.probe_wall_s),
                   decoder=Sandbox(settings.workers, name="decoder",
                                   limits=Limits(memory, settings.decode_cpu_s, settings.timeout_s)),
                   admission=admission)
