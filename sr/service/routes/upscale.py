"""POST /v1/upscale: the form's fields -> :meth:`sr.service.core.Service.upscale` -> the image (or its
budget map), as ``sr upscale`` does it."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import Response

from ..catalog import AUTO_DESCRIPTION
from ..core import UpscaleCall
from ..deps import ServiceDep, require_ready
from ..form import UpscaleForm
from ..formats import mime_types, request_formats
from .responses import ERRORS, sent
from .uploads import refuse_repeated_fields

MIME = mime_types()

router = APIRouter()


@router.post(
    "/upscale",
    response_class=Response,
    dependencies=[Depends(require_ready)],
    responses={200: {"description": "the upscaled image (or the budget-map PNG)",
                     "content": {mime: {} for mime in MIME.values()}}, **ERRORS},
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
    pre: Annotated[str | None, Form(max_length=128, description="a 1x restoration model run on the image "
                                    "first (denoise, de-JPEG, deblur): a name from GET /v1/models' pre "
                                    "(the server's models folder)")] = None,
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
    refuse_repeated_fields(await request.form())  # already parsed for the parameters: no second read
    form = UpscaleForm(model=model, pre=pre, scale=scale, outscale=outscale, width=width, height=height,
                       fmt=fmt, quality=quality, budget_map=budget_map, tta=tta, denoise=denoise, look=look,
                       keep_budget_map=keep_budget_map)
    return sent(await service.upscale(UpscaleCall(form, file, request.is_disconnected)))
