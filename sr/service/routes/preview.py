"""POST /v1/preview: the upload as the server decodes it, an 8-bit PNG (for inputs a browser cannot show)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Request, UploadFile
from fastapi.responses import Response

from ..deps import ServiceDep, require_ready
from .responses import ERRORS, REFUSED_BEFORE_DECODING, sent

router = APIRouter()


@router.post(
    "/preview",
    response_class=Response,
    dependencies=[Depends(require_ready)],
    responses={200: {"description": "the decoded input as an 8-bit PNG", "content": {"image/png": {}}},
               **ERRORS, 422: {**ERRORS[422], "description": REFUSED_BEFORE_DECODING}},
    summary="The upload decoded by the server, as a PNG (for inputs a browser cannot show)",
)
async def preview(
    request: Request,
    service: ServiceDep,
    file: Annotated[UploadFile, File(description="the image, as for /v1/upscale")],
) -> Response:
    return sent(await service.preview(file, request.is_disconnected))
