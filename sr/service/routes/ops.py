"""GET /healthz (liveness) and /readyz (readiness: the model is loaded)."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..deps import ServiceDep
from .responses import ERRORS

router = APIRouter(tags=["ops"])


@router.get("/healthz", summary="Liveness: the process answers (the decoder sandbox's counters: with "
                                "the API key, when the server has one)")
async def healthz(request: Request, service: ServiceDep) -> dict[str, object]:
    # async: answered on the event loop, never waiting for a thread that uploads or sync
    # endpoints may all hold (a liveness probe must not be starved).
    report: dict[str, object] = {"status": "ok", "model_state": service.hub.state,
                                 "jobs": service.pool.stats(), "uploads": service.admission.stats()}
    # The decoders' kill and CPU counters tell an attacker which file hurt: with a key
    # configured, only a caller who has it sees them. /healthz itself stays open, for probes.
    key = service.settings.api_key
    given = next((v for k, v in request.headers.raw if k == b"x-api-key"), b"")
    if key is None or secrets.compare_digest(given, key.encode()):
        report["sandbox"] = {"intake": service.intake.stats(), "decoder": dict(service.decoder.stats)}
    return report


@router.get("/readyz", summary="Readiness: the model is loaded (503 until then)",
            responses={503: ERRORS[503]})
def readyz(service: ServiceDep) -> JSONResponse:
    info = service.hub.describe()
    if not service.hub.ready:
        info["detail"] = ("model is still loading" if service.hub.state == "loading"
                          else f"model failed to load: {service.hub.error}")
        return JSONResponse(info, status_code=503, headers={"Retry-After": "2"})
    return JSONResponse({"status": "ready", **info})
