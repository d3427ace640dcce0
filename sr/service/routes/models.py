"""GET /v1/models: the models offered, with scales, parameters and Set5 PSNR; the models folder's with
their architecture, purpose and bf16 support, and its 1x restoration models as the ``pre`` choices."""

from __future__ import annotations

from fastapi import APIRouter

from ..deps import ServiceDep
from .responses import ERRORS

router = APIRouter()


@router.get("/models", summary="Models offered, with scales, parameters and Set5 PSNR",
            responses={401: ERRORS[401]})
def models(service: ServiceDep) -> dict[str, object]:
    catalog = service.hub.catalog
    return {
        "default": catalog.default,
        "families": catalog.family_list(),
        "pre": catalog.folder().pre_list(),
        "models": catalog.model_list(),
    }
