"""The HTTP shell over :mod:`sr.service.core`: one router per concern, the API's under ``/v1`` (behind
the API key), and the one table of error answers (:mod:`.errors`)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from ..deps import require_api_key
from . import budget_maps, models, ops, pages, preview, upscale


def v1_router() -> APIRouter:
    """The API: upscale, preview, budget maps, models; each behind the API key (when configured)."""
    v1 = APIRouter(prefix="/v1", tags=["v1"], dependencies=[Depends(require_api_key)])
    for module in (upscale, preview, budget_maps, models):
        v1.include_router(module.router)
    return v1


def routers() -> list[APIRouter]:
    """Every router of the app, in the order they are matched (and listed in OpenAPI)."""
    return [v1_router(), ops.router, pages.router]
