"""FastAPI app: a thin HTTP layer over :class:`sr.inference.Upscaler` and :mod:`sr.io`.

``create_app(settings)`` builds an app (tests use their own settings); ``app`` is the one built
from ``SR_*`` environment variables, for ``uvicorn service.app:app``.

Status codes (errors are JSON ``{"detail": "..."}``):
  400 empty upload, corrupt or truncated image      401 API key missing or wrong (when configured)
  404 no such kept budget map                        408 headers or upload stalled (header/body timeout)
  413 upload over the byte limit / image over the pixel limit
  415 not an image, an animated image, or an unsupported pixel mode (float, LAB...)
  422 bad or repeated field: unknown model, scale, format...; output or work over the server's limits;
      a job predicted to outlast the time limit; a file refused before decoding (scan/metadata bombs)
  503 model still loading, or workers and queue full (with Retry-After)
  504 the request ran past the time limit (its job is stopped)
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.util
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, File, Form, HTTPException, Request, Security, UploadFile
from fastapi import Path as UrlPath
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.security import APIKeyHeader
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import FormData

from sr.inference import UpscaleError, Upscaler
from sr.io import DecodedImage, ImageError
from sr.request import UpscaleRequest

from .hub import AUTO_DESCRIPTION, ModelHub
from .intake import AdmissionState, Intake, UploadAdmission
from .jobs import ClientGoneError, JobPool, JobTimeoutError, QueueFullError, Work, fix_mmap_threshold
from .limits import ApiKeyMiddleware, BodyLimitMiddleware
from .pipeline import (
    BudgetMapStore,
    JobRequest,
    JobResult,
    WorkLimitError,
    engine_for,
    form_request,
    http_error,
    levels_png,
    mime_types,
    plan_work,
    request_formats,
    result_headers,
    run_job,
)
from .sandbox import Limits, Sandbox
from .settings import Settings

log = logging.getLogger("sr.service")
STATIC_DIR = Path(__file__).resolve().parent / "static"
# Swagger UI's JS/CSS, served locally (works offline). Swagger UI 5, from the fastapi-offline wheel:
# the 4.x of swagger-ui-bundle cannot read OpenAPI 3.1, FastAPI's document ("Unable to render this
# definition", issue 45).
DOCS_ASSETS = "/docs-assets"
DOCS_ASSETS_DIR = Path(importlib.util.find_spec("fastapi_offline").origin).parent / "static"
MIME = mime_types()
EXPOSED_HEADERS = ["Server-Timing", "X-Model", "X-Model-Choice", "X-Scale", "X-Image-Size", "X-Budget-Max",
                   "X-Budget-Map-Id", "Content-Disposition"]
# Form fields that take one value: a repeated one is refused rather than silently taking the last.
SINGLE_FIELDS = ("file", "scale", "outscale", "width", "height", "model", "format", "quality", "budget_map",
                 "tta", "denoise", "look", "keep_budget_map")
# Status for a request whose client went away (nginx's convention; nobody reads it).
CLIENT_CLOSED = 499


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
        k_max = self.hub.budget_k_max(family) if asked.budget_map or keep_budget_map else None
        return JobRequest(data=data, request=asked, max_pixels=s.max_pixels, budget_k_max=k_max,
                          keep_budget_map=keep_budget_map, max_output_pixels=s.max_output_pixels,
                          max_work_pixels=s.max_work_pixels)

    async def admit(self, engine: Upscaler, job: JobRequest) -> Work:
        """The job's predicted work, or the 4xx that refuses it before any work: the header gives
        the size (read in the sandbox, on the intake lane of the upload's size), the engine's plan
        the output, passes and predicted time."""
        try:
            probe = await self.intake.probe(job.data, self.settings.max_pixels)
            (out_w, out_h), work = plan_work(engine, probe.width, probe.height, job)
            check_time(self, work, (out_w, out_h), job.request.tta)
        except (ImageError, UpscaleError, WorkLimitError) as e:  # each is the request's fault: a 4xx
            raise (http_error(e, job.data) or HTTPException(400, detail=str(e))) from None
        except Exception as e:  # noqa: BLE001 - the sandbox's own failures (503), else a server fault
            raise (http_error(e, job.data) or e) from None
        return work

    async def run(self, engine: Upscaler, job: JobRequest, work: Work,
                  disconnected: Callable[[], Awaitable[bool]]) -> JobResult | None:
        """The admitted job's result from a worker (decoded in the sandbox), the HTTP error that
        says why not, or None when the client went away (the job is then cancelled)."""
        settings = self.settings
        try:
            job.decode = self.decode(engine, job)
            return await self.pool.run(run_job, engine, job, timeout=settings.timeout_s, work=work,
                                       stop=job.stop, disconnected=disconnected)
        except QueueFullError as e:
            raise HTTPException(503, detail=str(e), headers={"Retry-After": str(e.retry_after)}) from None
        except JobTimeoutError as e:
            raise HTTPException(504, detail=str(e)) from None
        except ClientGoneError:
            log.info("client gone: job cancelled")
            return None
        except Exception as e:  # noqa: BLE001 - mapped to a 4xx when the input is at fault, else 500
            error = http_error(e, job.data)
            if error is None:
                raise
            raise error from None

    def decode(self, engine: Upscaler, job: JobRequest) -> Callable[..., DecodedImage]:
        """The job's decode: in the sandbox, then the work predicted again from the decoded size
        (an orientation the header read missed cannot buy a job past the time limit, row C)."""
        def decode(data: bytes, max_pixels: int | None) -> DecodedImage:
            img = self.decoder.run("decode", data, max_pixels=max_pixels, wall_s=self.settings.timeout_s,
                                   should_stop=job.should_stop)
            (out_w, out_h), work = plan_work(engine, img.width, img.height, job)
            check_time(self, work, (out_w, out_h), job.request.tta)
            return img

        return decode


def check_time(service: Service, work: Work, out: tuple[int, int], tta: bool) -> None:
    """422 for a job that cannot finish within the time limit: it would hold a worker for the
    whole limit, then 504."""
    settings = service.settings
    predicted = service.pool.estimate(work)
    if predicted > settings.timeout_s:
        raise WorkLimitError(
            f"{out[0]}x{out[1]} output{' with tta' if tta else ''} needs about {predicted:.0f} s of work at "
            f"this server's measured rate ({work.forwards} network forwards, {work.tiled_mp:.1f} MP),"
            f" over its time limit of {settings.timeout_s:g} s (SR_TIMEOUT_S); ask for a smaller output"
            + (" or turn tta off" if tta else ""))


# --- dependencies ---------------------------------------------------------------------------

def get_settings(request: Request) -> Settings:
    return request.app.state.service.settings


def get_service(request: Request) -> Service:
    return request.app.state.service


# The one spelling of "this app's Service" that routes take as a parameter.
ServiceDep = Annotated[Service, Depends(get_service)]


api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False,
                              description="required only when the server is started with an API key")


API_KEY_DETAIL = "missing or wrong API key (send it in the X-API-Key header)"


def require_api_key(
    request: Request,
    settings: Annotated[Settings, Depends(get_settings)],
    key: Annotated[str | None, Security(api_key_header)],
) -> None:
    # ApiKeyMiddleware already refused keyless requests before their body was read; this
    # dependency documents the key in OpenAPI and guards routes should the middleware be removed.
    # Both compare the header's raw bytes with the (ASCII-only, see Settings) key.
    if settings.api_key is None:
        return
    given = next((v for k, v in request.headers.raw if k == b"x-api-key"), None)
    if key is None or given is None or not secrets.compare_digest(given, settings.api_key.encode()):
        raise HTTPException(401, detail=API_KEY_DETAIL, headers={"WWW-Authenticate": "ApiKey"})


def require_ready(service: ServiceDep) -> None:
    if service.hub.state == "loading":
        raise HTTPException(503, detail="model is still loading; retry shortly", headers={"Retry-After": "2"})
    if service.hub.state == "failed":
        raise HTTPException(503, detail=f"model failed to load: {service.hub.error}",
                            headers={"Retry-After": "60"})


# --- API --------------------------------------------------------------------------------------

def refuse_repeated_fields(form: FormData) -> None:
    """422 for a field given more than once, rather than silently taking the last value."""
    repeated = [f"{k} ({len(form.getlist(k))} times)" for k in SINGLE_FIELDS if len(form.getlist(k)) > 1]
    if repeated:
        raise HTTPException(422, detail=f"repeated form field: {', '.join(repeated)}; send each field once")


async def _read_upload(file: UploadFile, settings: Settings) -> bytes:
    data = await file.read()
    if not data:
        raise HTTPException(400, detail="the uploaded file is empty")
    if len(data) > settings.max_upload_bytes:
        raise HTTPException(413, detail=f"upload too large: {len(data)} bytes, the limit is "
                                        f"{settings.max_upload_bytes} bytes")
    return data


v1 = APIRouter(prefix="/v1", tags=["v1"], dependencies=[Depends(require_api_key)])

REFUSED_BEFORE_DECODING = "a file refused before decoding (over 100 JPEG scans, PNG metadata bombs)"
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {"application/json": {"example": {"detail": "..."}}}}
    for code, text in {
        400: "empty upload, or a corrupt / truncated image",
        401: "API key missing or wrong (only when the server has one)",
        408: "the request's headers or its upload stalled (header or body timeout)",
        413: "upload over the byte limit, or image over the pixel limit",
        415: "not an image, an animated image, or an unsupported pixel format",
        422: "bad or repeated field: unknown model, unavailable scale, bad format, quality, denoise or look "
             "(or denoise / look with a model other than photo / auto, or a look at a scale photo-natural "
             "lacks); an output / work over the server's "
             "limits, or predicted to take longer than its time limit; " + REFUSED_BEFORE_DECODING,
        503: "model loading, or server busy (see Retry-After)",
        504: "request took longer than the server's time limit",
    }.items()
}


@v1.post(
    "/upscale",
    response_class=Response,
    dependencies=[Depends(require_ready)],
    responses={200: {"description": "the upscaled image (or the budget-map PNG)",
                     "content": {mime: {} for mime in MIME.values()}}, **_ERRORS},
    summary="Upscale one image",
)
async def upscale(
    request: Request,
    service: ServiceDep,
    file: Annotated[UploadFile, File(description="the image (PNG, JPEG, WebP, BMP, TIFF, GIF...)")],
    # Values are checked by the request (sr.request.UpscaleRequest.validate), as the CLI's are:
    # the same bad value gets the same sentence from both, here as a 422.
    scale: Annotated[int | None, Form(description="model scale 2, 3 or 4 (default: the smallest)")] = None,
    outscale: Annotated[float | None, Form(description="final factor, any number > 0")] = None,
    width: Annotated[int | None, Form(description="output width in pixels")] = None,
    height: Annotated[int | None, Form(description="output height in pixels")] = None,
    model: Annotated[str | None, Form(max_length=128, description="a name from GET /v1/models; auto: "
                                      + AUTO_DESCRIPTION)] = None,
    fmt: Annotated[Literal[request_formats()],  # type: ignore[valid-type]
                   Form(alias="format", description="output format; same: the upload's, else PNG")] = "same",
    quality: Annotated[int, Form(description="JPEG/WebP quality 1-100")] = 95,
    budget_map: Annotated[bool, Form(description="return the attention-budget heat-map PNG instead")] = False,
    tta: Annotated[bool, Form(description="quality mode: average the model over 8 flips/rotations "
                                          "(sharper, 8x the compute; gain: the model card)")] = False,
    denoise: Annotated[float | None, Form(description="photo and auto only: 0..1, photo's weights blended "
                                                      "with asa-base's, (1-D)*asa-base + D*photo "
                                                      "(default 1: photo as trained)")] = None,
    look: Annotated[float | None, Form(description="photo and auto only (auto: its photo side), where GET "
                                                   "/v1/models says look: 0..1, 0 = photo as trained "
                                                   "(fidelity-first, default), 1 = photo-natural "
                                                   "(GAN-trained texture); in between blends the weights, "
                                                   "(1-L)*photo + L*photo-natural, before denoise's blend; "
                                                   "X-Model names it (photo-x2@look=0.5)")] = None,
    keep_budget_map: Annotated[bool, Form(description="also keep this result's attention-budget map for "
                                                      "GET /v1/budget-maps/{id} (id in X-Budget-Map-Id): "
                                                      "showing it then needs no second upscale")] = False,
) -> Response:
    # As `sr upscale`: the arguments -> one UpscaleRequest -> its engine and plan -> run -> output.
    start = time.perf_counter()
    refuse_repeated_fields(await request.form())  # already parsed for the parameters: no second read
    family, asked = form_request(service.hub, model, scale=scale, outscale=outscale, width=width,
                                 height=height, fmt=fmt, quality=quality, budget_map=budget_map, tta=tta,
                                 denoise=denoise, look=look)
    engine = engine_for(service.hub, family, asked)
    job = service.job(await _read_upload(file, service.settings), family, asked, keep_budget_map)
    work = await service.admit(engine, job)
    result = await service.run(engine, job, work, request.is_disconnected)
    if result is None:
        return Response(status_code=CLIENT_CLOSED)
    timings = {**result.timings_ms, "total": (time.perf_counter() - start) * 1e3}
    headers = result_headers(result, job, file.filename, timings)
    if result.budget_levels is not None:
        map_id = service.budget_maps.put(result.budget_levels, job.budget_k_max)
        if map_id is not None:
            headers["X-Budget-Map-Id"] = map_id
    return Response(content=result.body, media_type=MIME[result.fmt], headers=headers)


@v1.post(
    "/preview",
    response_class=Response,
    dependencies=[Depends(require_ready)],
    responses={200: {"description": "the decoded input as an 8-bit PNG", "content": {"image/png": {}}},
               **_ERRORS, 422: {**_ERRORS[422], "description": REFUSED_BEFORE_DECODING}},
    summary="The upload decoded by the server, as a PNG (for inputs a browser cannot show)",
)
async def preview(
    request: Request,
    service: ServiceDep,
    file: Annotated[UploadFile, File(description="the image, as for /v1/upscale")],
) -> Response:
    settings = service.settings
    data = await _read_upload(file, settings)
    stop = threading.Event()
    try:
        probe = await service.intake.probe(data, settings.max_pixels)
        in_w, in_h = probe.width, probe.height
        # Decoded and encoded in the sandbox: a 16-bit 4096^2 RGBA upload never becomes float pixels
        # in the server's own memory (row G: +1 GB), only a PNG.
        preview = functools.partial(service.decoder.run, "preview", data, max_pixels=settings.max_pixels,
                                    wall_s=settings.timeout_s, should_stop=stop.is_set)
        body = await service.pool.run(preview, timeout=settings.timeout_s,
                                      work=Work(io_mp=2 * in_w * in_h / 1e6),  # decode + encode: no network
                                      stop=stop, disconnected=request.is_disconnected, learn=False)
    except QueueFullError as e:
        raise HTTPException(503, detail=str(e), headers={"Retry-After": str(e.retry_after)}) from None
    except JobTimeoutError as e:
        raise HTTPException(504, detail=str(e)) from None
    except ClientGoneError:
        return Response(status_code=CLIENT_CLOSED)
    except ImageError as e:
        raise (http_error(e, data) or HTTPException(400, detail=str(e))) from None
    except Exception as e:  # noqa: BLE001 - the sandbox's own failures (503), else a server fault
        raise (http_error(e, data) or e) from None
    return Response(content=body, media_type="image/png",
                    headers={"X-Image-Size": f"{in_w}x{in_h}", "X-Content-Type-Options": "nosniff",
                             "Cache-Control": "no-store"})


@v1.get(
    "/budget-maps/{map_id}",
    response_class=Response,
    responses={200: {"description": "the attention-budget heat-map PNG (input size), as budget_map=true "
                                    "would have returned it", "content": {"image/png": {}}},
               401: _ERRORS[401],
               404: {"description": "no such map (never made, or dropped for newer ones: upscale again "
                                    "with budget_map=true)"}},
    summary="The budget map kept with a result (POST /v1/upscale with keep_budget_map=true)",
)
async def budget_map_of_result(
    service: ServiceDep,
    map_id: Annotated[str, UrlPath(max_length=64, description="the X-Budget-Map-Id of an upscale")],
) -> Response:
    kept = service.budget_maps.get(map_id)
    if kept is None:
        raise HTTPException(404, detail="no such budget map: it was never made or newer ones replaced it; "
                                        "upscale again with budget_map=true")
    levels, k_max = kept
    body = await asyncio.to_thread(levels_png, levels)
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
    if k_max:
        headers["X-Budget-Max"] = f"{k_max:g}"
    return Response(content=body, media_type="image/png", headers=headers)


@v1.get("/models", summary="Models offered, with scales, parameters and Set5 PSNR",
        responses={401: _ERRORS[401]})
def models(service: ServiceDep) -> dict[str, Any]:
    hub = service.hub
    return {
        "default": hub.default,
        "families": hub.family_list(),
        "models": hub.catalog(),
    }


# --- app --------------------------------------------------------------------------------------

def _validation_message(errors: list[dict[str, Any]]) -> str:
    parts = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "header")]
        parts.append(f"{'.'.join(loc) or 'request'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


async def _on_validation_error(_: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    content = {"detail": _validation_message(errors), "errors": jsonable_encoder(errors, exclude={"input"})}
    return JSONResponse(status_code=422, content=content)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(status_code=500, content={"detail": f"internal server error ({type(exc).__name__})"})


# Timed at start-up on the warmed model: a square (one forward, mostly per-megapixel cost; ~0.1 s
# for asa-base x2 on 2 idle cores) and a strip of thin tiles (mostly per-forward cost, ~0.15 s).
CALIBRATION_SQUARE = 128
CALIBRATION_STRIP = 2048


def _calibrate(service: Service, engine: Upscaler) -> None:
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
    model = service.pool.model
    model.calibrate(*timed)
    log.info("work model: x%.2f the priors' seconds per megapixel, x%.2f per forward (%s)", model.mp_factor,
             model.forward_factor, ", ".join(f"{w.forwards} forwards in {t:.2f} s" for w, t in timed))


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    admission = AdmissionState(limit=settings.upload_limit, per_client=settings.max_uploads_per_client,
                               body_total_s=settings.body_total_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202 - FastAPI's lifespan protocol
        fix_mmap_threshold()  # big upload bodies and arrays go back to the system when freed
        memory = settings.sandbox_memory_mb * 2**20
        service = Service(settings=settings, hub=ModelHub(settings),
                          pool=JobPool(settings.workers, settings.max_queue), budget_maps=BudgetMapStore(),
                          intake=Intake(memory, settings.probe_cpu_s, settings.probe_wall_s),
                          decoder=Sandbox(settings.workers, name="decoder",
                                          limits=Limits(memory, settings.decode_cpu_s, settings.timeout_s)),
                          admission=admission)
        app.state.service = service
        # The decoder processes start with the model's load (python + numpy + Pillow: seconds on a
        # loaded machine), not on the first request; the calibration waits for them, since their
        # start would slow its timings.
        service.intake.start()
        service.decoder.start()

        def calibrate(engine: Upscaler) -> None:
            service.intake.wait_ready()
            service.decoder.wait_ready()
            _calibrate(service, engine)

        def load() -> None:
            service.hub.load_default(calibrate)

        # Load in the background so /healthz answers at once and /readyz says 503 until loaded.
        threading.Thread(target=load, name="sr-load", daemon=True).start()
        try:
            yield
        finally:
            service.pool.shutdown()
            service.intake.close()
            service.decoder.close()

    app = FastAPI(
        title="sr: image super-resolution",
        description="Upscale images with an adaptive-sparse-attention network. Web page at `/`.",
        version="1",
        lifespan=lifespan,
        docs_url=None,   # served below from local assets: the default loads Swagger UI from a CDN
        redoc_url=None,  # one viewer is enough: /docs
    )
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(Exception, _on_unexpected)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.body_limit,
                       idle_timeout=settings.body_timeout_s, min_rate=settings.body_min_rate,
                       total_timeout=settings.body_total_s,
                       detail=f"upload too large: the limit is {settings.max_upload_bytes} bytes "
                              f"({settings.max_upload_bytes / 2**20:.1f} MiB)")
    # Outside the body guard: an upload over the caps is refused before any byte of it is read.
    app.add_middleware(UploadAdmission, state=admission)
    if settings.api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key, detail=API_KEY_DETAIL)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["X-API-Key"],
                           expose_headers=EXPOSED_HEADERS)
    app.include_router(v1)

    @app.get("/healthz", tags=["ops"], summary="Liveness: the process answers")
    async def healthz(service: ServiceDep) -> dict[str, Any]:
        # async: answered on the event loop, never waiting for a thread that uploads or sync
        # endpoints may all hold (a liveness probe must not be starved, issue 54 row D).
        return {"status": "ok", "model_state": service.hub.state, "jobs": service.pool.stats(),
                "uploads": service.admission.stats(),
                "sandbox": {"intake": service.intake.stats(), "decoder": dict(service.decoder.stats)}}

    @app.get("/readyz", tags=["ops"], summary="Readiness: the model is loaded (503 until then)",
             responses={503: _ERRORS[503]})
    def readyz(service: ServiceDep) -> JSONResponse:
        info = service.hub.describe()
        if not service.hub.ready:
            info["detail"] = ("model is still loading" if service.hub.state == "loading"
                              else f"model failed to load: {service.hub.error}")
            return JSONResponse(info, status_code=503, headers={"Retry-After": "2"})
        return JSONResponse({"status": "ready", **info})

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:  # browsers ask for this path whatever the page links
        return FileResponse(STATIC_DIR / "favicon.png", media_type="image/png")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.mount(DOCS_ASSETS, StaticFiles(directory=DOCS_ASSETS_DIR), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - API docs",
            swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
        )

    return app


def __getattr__(name: str) -> Any:
    # `service.app:app` for uvicorn, built from the environment on first access (not at import,
    # so importing create_app never reads SR_* variables).
    if name == "app":
        built = create_app()
        globals()["app"] = built
        return built
    raise AttributeError(name)
