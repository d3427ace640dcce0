"""Admission before work (issue 54): what an upload may cost before it reaches the job pool.

:class:`UploadAdmission` (ASGI middleware) counts every upload from its first byte to its response,
in total and per client address, and refuses one over either cap with a JSON 503 and Retry-After
*before* its body is read: reading bodies, parsing headers and the pre-checks are work too, and
51 drip-fed uploads used to take every connection uvicorn had (row D). Requests that are not
uploads (``/healthz``, ``/readyz``, the page) are never counted, so a liveness probe is not starved.

:class:`Intake` runs the header read and the pre-checks of an upload in the decoder sandbox
(:mod:`sr.service.sandbox`) with a small CPU and wall allowance, on two lanes: uploads of up to
:data:`SMALL_UPLOAD_BYTES` on one, bigger ones on the other. A small malformed file, whose check
takes microseconds, never waits behind eight 19 MB hostile uploads (row E: it waited 34.5 s).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Receive, Scope, Send

from .limits import send_json_error
from .sandbox import Limits, Probe, Sandbox

# Uploads up to this size take the small lane: every valid image a page sends for a quick try, and
# every tiny hostile file (the bombs of issues 45 and 54 that fit in a few KB).
SMALL_UPLOAD_BYTES = 256 * 1024
_UPLOAD_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass
class _Upload:
    client: str
    started: float
    deadline: float  # when its body must be in, at the latest (the body guard's cap)


@dataclass
class AdmissionState:
    """Uploads in flight; shared by the middleware and ``/healthz``'s report."""

    limit: int
    per_client: int
    body_total_s: float
    uploads: dict[int, _Upload] = field(default_factory=dict)
    refused: int = 0

    def retry_after(self) -> int:
        """Seconds until an upload slot frees at the latest: the earliest body deadline in flight
        (a job then holds its slot for at most its time limit, counted by the job pool's 503)."""
        now = time.monotonic()
        soonest = min((u.deadline - now for u in self.uploads.values()), default=1.0)
        return max(1, math.ceil(soonest))

    def stats(self) -> dict[str, int]:
        return {"uploads": len(self.uploads), "upload_limit": self.limit, "refused": self.refused}


class UploadAdmission:
    """JSON 503 + Retry-After for an upload over ``state.limit`` in flight, or ``state.per_client``
    from one client address, before a byte of its body is read."""

    def __init__(self, app: ASGIApp, state: AdmissionState, prefix: str = "/v1/") -> None:
        self.app = app
        self.state = state
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in _UPLOAD_METHODS \
                or not scope.get("path", "").startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        state = self.state
        client = (scope.get("client") or ("?", 0))[0]
        mine = sum(1 for u in state.uploads.values() if u.client == client)
        if len(state.uploads) >= state.limit or mine >= state.per_client:
            state.refused += 1
            which = (f"{mine} uploads from your address are in progress (the limit is {state.per_client})"
                     if mine >= state.per_client else
                     f"{len(state.uploads)} uploads are in progress (the limit is {state.limit})")
            retry = state.retry_after()
            await send_json_error(send, 503, f"server busy: {which}; retry in {retry} s",
                                  [(b"retry-after", str(retry).encode())])
            return
        key = id(scope)
        now = time.monotonic()
        state.uploads[key] = _Upload(client, now, now + state.body_total_s)
        try:
            await self.app(scope, receive, send)
        finally:
            state.uploads.pop(key, None)


class Intake:
    """Header reads and pre-checks of uploads, in sandboxed processes, on a small and a large lane."""

    def __init__(self, memory_bytes: int, cpu_s: float, wall_s: float) -> None:
        limits = Limits(memory_bytes=memory_bytes, cpu_s=cpu_s, wall_s=wall_s)
        self.small = Sandbox(1, limits, name="intake-small")
        self.large = Sandbox(1, limits, name="intake-large")

    def start(self) -> None:
        self.small.start()
        self.large.start()

    def wait_ready(self) -> None:
        self.small.wait_ready()
        self.large.wait_ready()

    async def probe(self, data: bytes, max_pixels: int | None) -> Probe:
        lane = self.small if len(data) <= SMALL_UPLOAD_BYTES else self.large
        return await lane.call(lane.probe, data, max_pixels=max_pixels)

    def stats(self) -> dict[str, dict[str, float]]:
        return {"small": dict(self.small.stats), "large": dict(self.large.stats)}

    def close(self) -> None:
        self.small.close()
        self.large.close()
