"""The web page, its favicon and the API docs (Swagger UI from local assets: works offline)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
# Swagger UI's JS/CSS, served locally (works offline). Swagger UI 5, from the fastapi-offline wheel:
# the 4.x of swagger-ui-bundle cannot read OpenAPI 3.1, FastAPI's document ("Unable to render this
# definition").
DOCS_ASSETS = "/docs-assets"
DOCS_ASSETS_DIR = Path(importlib.util.find_spec("fastapi_offline").origin).parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/")
def index() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


@router.get("/favicon.ico")
def favicon() -> FileResponse:  # browsers ask for this path whatever the page links
    return FileResponse(STATIC_DIR / "favicon.png", media_type="image/png")


@router.get("/docs")
def docs(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    app = request.app
    return get_swagger_ui_html(
        openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - API docs",
        swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
    )
