"""Admission before work: what an upload may cost before it reaches the job pool.

:class:`UploadAdmission` (ASGI middleware) counts every upload from its first byte to its response,
in total and per client address, and refuses one over either cap with a JSON 503 and Retry-After
*before* its body is read: reading bodies, parsing headers and the pre-checks are work too, and
51 drip-fed uploads used to take every connection uvicorn had (row D). Requests that are not
uploads (``/healthz``, ``/readyz``, the page) are never counted, so a liveness probe is not starved.

:class:`Intake` runs the header read and the pre-checks of an upload in the decoder sandbox
(:mod:`sr.service.sandbox`) with a small CPU and wall allowance, on two lanes: uploads of up to
:data:`SMALL_UPLOAD_BYTES` on one, bigger ones on the other. A small malformed file, whose check
takes microseconds, never waits behind eight 19 MB hostile uploads (row E: it waited 34.5 s). On
each lane, client addresses take turns (:class:`FairGate`): one address cannot hold a lane.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Receive, Scope, Send

from .jobs import CURRENT_CLIENT
from .limits import send_json_error
from .sandbox import Limits, Probe, Sandbox

# Uploads up to this size take the small lane: every valid image a page sends for a quick try, and
# every tiny hostile file (the decompression and metadata bombs that fit in a few KB).
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
        token = CURRENT_CLIENT.set(client)  # the lanes and the job pool serve addresses in turn
        try:
            await self.app(scope, receive, send)
        finally:
            CURRENT_CLIENT.reset(token)
            state.uploads.pop(key, None)


class FairGate:
    """At most ``slots`` holders at once; the others wait, and a freed slot goes to the waiting
    client (address) that has had the fewest turns since the gate was last idle, the earliest
    waiter among equals. One address with six 19 MB uploads queued then delays another's upload by
    one header read, not six (a 349 KB JPEG waited 17.6 s on the large lane)."""

    def __init__(self, slots: int = 1) -> None:
        self.slots = slots
        self.busy = 0
        self._waiting: list[tuple[str, int, asyncio.Future[None]]] = []
        self._turns: dict[str, int] = {}
        self._seq = itertools.count()

    @asynccontextmanager
    async def turn(self, client: str) -> AsyncIterator[None]:
        await self._acquire(client)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, client: str) -> None:
        if self.busy < self.slots and not self._waiting:
            self.busy += 1
            self._turns[client] = self._turns.get(client, 0) + 1
            return
        entry = (client, next(self._seq), asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            await entry[2]
        except asyncio.CancelledError:
            if entry in self._waiting:
                self._waiting.remove(entry)
            elif entry[2].done() and not entry[2].cancelled():
                self._release()  # handed the slot as it was cancelled: pass it on
            raise

    def _release(self) -> None:
        while self._waiting:
            entry = min(self._waiting, key=lambda e: (self._turns.get(e[0], 0), e[1]))
            self._waiting.remove(entry)
            if not entry[2].done():
                self._turns[entry[0]] = self._turns.get(entry[0], 0) + 1
                entry[2].set_result(None)  # the slot passes on: busy stays
                return
        self.busy -= 1
        if self.busy == 0:
            self._turns.clear()  # idle: every client starts even


class Intake:
    """Header reads and pre-checks of uploads, in sandboxed processes, on a small and a large lane."""

    def __init__(self, memory_bytes: int, cpu_s: float, wall_s: float) -> None:
        limits = Limits(memory_bytes=memory_bytes, cpu_s=cpu_s, wall_s=wall_s)
        self.small = Sandbox(1, limits, name="intake-small")
        self.large = Sandbox(1, limits, name="intake-large")
        # One gate per lane, as many slots as its processes: clients take turns on each lane.
        self.gates = {self.small.name: FairGate(self.small.processes),
                      self.large.name: FairGate(self.large.processes)}

    def start(self) -> None:
        self.small.start()
        self.large.start()

    def wait_ready(self) -> None:
        self.small.wait_ready()
        self.large.wait_ready()

    async def probe(self, data: bytes, max_pixels: int | None, client: str | None = None) -> Probe:
        """The upload's header read on the lane of its size, when its client's turn comes on that lane
        (``client``: the request's address by default, :data:`~sr.service.jobs.CURRENT_CLIENT`)."""
        lane = self.small if len(data) <= SMALL_UPLOAD_BYTES else self.large
        async with self.gates[lane.name].turn(CURRENT_CLIENT.get() if client is None else client):
            return await lane.call(lane.probe, data, max_pixels=max_pixels)

    def stats(self) -> dict[str, dict[str, float]]:
        return {"small": dict(self.small.stats), "large": dict(self.large.stats)}

    def close(self) -> None:
        self.small.close()
        self.large.close()
