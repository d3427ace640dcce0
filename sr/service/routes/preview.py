"""POST /v1/preview: the upload as the server decodes it, an 8-bit PNG (for inputs a browser cannot show)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Request, UploadFile
from fastapi.responses import Response

from ..deps import ServiceDep, require_ready
from .responses import CLIENT_CLOSED, ERRORS, NO_SNIFF_NO_STORE, REFUSED_BEFORE_DECODING
from .uploads import read_upload

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
    data = await read_upload(file, service.settings)
    shown = await service.preview(data, request.is_disconnected)
    if shown is None:
        return Response(status_code=CLIENT_CLOSED)
    body, width, height = shown
    return Response(content=body, media_type="image/png",
                    headers={"X-Image-Size": f"{width}x{height}", **NO_SNIFF_NO_STORE})
