"""GET /v1/budget-maps/{id}: the budget map kept with a result (keep_budget_map=true)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, HTTPException
from fastapi import Path as UrlPath
from fastapi.responses import Response

from ..answer import NO_SNIFF_NO_STORE
from ..budget_maps import levels_png
from ..deps import ServiceDep
from .responses import ERRORS

router = APIRouter()


@router.get(
    "/budget-maps/{map_id}",
    response_class=Response,
    responses={200: {"description": "the attention-budget heat-map PNG (input size), as budget_map=true "
                                    "would have returned it", "content": {"image/png": {}}},
               401: ERRORS[401],
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
    headers = dict(NO_SNIFF_NO_STORE)
    if k_max:
        headers["X-Budget-Max"] = f"{k_max:g}"
    return Response(content=body, media_type="image/png", headers=headers)
