"""The app factory: lifespan, guards, routers, static files and the error handlers, over the domain core.

``create_app(settings)`` builds an app: ``sr serve`` passes the settings of its flags and ``SR_*``
variables, tests their own; without settings it reads the ``SR_*`` variables, which makes it the
factory of ``uvicorn --factory sr.service.app:create_app``. The routes live in
:mod:`sr.service.routes` (one module per concern), their dependencies in :mod:`sr.service.deps`,
the domain in :mod:`sr.service.core` (:class:`~sr.service.core.Service`) and the modules it uses; each
domain error's HTTP answer is one table, :mod:`sr.service.routes.errors`.

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

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from .core import build_service
from .deps import API_KEY_DETAIL
from .intake import AdmissionState, UploadAdmission
from .limits import ApiKeyMiddleware, BodyLimitMiddleware, ResponsePacing
from .memory import fix_mmap_threshold
from .routes import errors, routers
from .routes.pages import DOCS_ASSETS, DOCS_ASSETS_DIR, STATIC_DIR
from .settings import Settings

log = logging.getLogger("sr.service")
EXPOSED_HEADERS = ["Server-Timing", "X-Model", "X-Model-Choice", "X-Scale", "X-Image-Size", "X-Budget-Max",
                   "X-Budget-Map-Id", "Content-Disposition"]


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


def _add_guards(app: FastAPI, settings: Settings, admission: AdmissionState) -> None:
    """The ASGI guards, innermost first: body limits, upload admission, API key, CORS, response pacing."""
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
    # Outermost: every answer, errors included, leaves in pieces the send timeout can stop.
    app.add_middleware(ResponsePacing, piece=settings.max_buffered_bytes // 2)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app for ``settings`` (None: from the ``SR_*`` environment variables); nothing starts until
    its lifespan does."""
    settings = settings or Settings.from_env()
    admission = AdmissionState(limit=settings.upload_limit, per_client=settings.max_uploads_per_client,
                               body_total_s=settings.body_total_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        fix_mmap_threshold()  # big upload bodies and arrays go back to the system when freed
        app.state.service = service = build_service(settings, admission)
        service.start()
        try:
            yield
        finally:
            service.close()

    app = FastAPI(
        title="sr: image super-resolution",
        description="Upscale images with an adaptive-sparse-attention network. Web page at `/`.",
        version="1",
        lifespan=lifespan,
        docs_url=None,   # served by routes.pages from local assets: the default loads Swagger UI from a CDN
        redoc_url=None,  # one viewer is enough: /docs
    )
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(Exception, _on_unexpected)
    errors.install(app)  # every domain error's status, detail and headers: one table
    _add_guards(app, settings, admission)
    for router in routers():
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.mount(DOCS_ASSETS, StaticFiles(directory=DOCS_ASSETS_DIR), name="docs-assets")
    return app

