"""BodyLimitMiddleware on raw ASGI: refuses on Content-Length, stops reading past the limit."""

from __future__ import annotations

import asyncio
import json

from sr.service.limits import ApiKeyMiddleware, BodyLimitMiddleware


async def _reading_app(scope, receive, send) -> None:
    """Reads the whole body, then answers 200 with its length."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


def _call(app, chunks: list[bytes], headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes, int]:
    """(status, body, chunks the app pulled from the client)."""
    pulled = 0
    sent: list[dict] = []

    async def receive() -> dict:
        nonlocal pulled
        pulled += 1
        i = pulled - 1
        return {"type": "http.request", "body": chunks[i], "more_body": i < len(chunks) - 1}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/upscale", "headers": headers}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], body, pulled


def test_declared_length_over_limit_is_refused_without_reading() -> None:
    app = BodyLimitMiddleware(_reading_app, max_bytes=100)
    status, body, pulled = _call(app, [b"x" * 50] * 10, [(b"content-length", b"500")])
    assert (status, pulled) == (413, 0)
    assert "limit is 100 bytes" in json.loads(body)["detail"]


def test_chunked_body_is_cut_at_the_first_chunk_past_the_limit() -> None:
    app = BodyLimitMiddleware(_reading_app, max_bytes=100)
    status, body, pulled = _call(app, [b"x" * 40] * 50, [])  # no Content-Length: 2000 bytes streamed
    assert status == 413
    assert pulled == 3  # 40, 80, 120 > 100: stop; the other 47 chunks are never read
    assert json.loads(body)["detail"].startswith("upload too large")


def test_body_within_limit_and_get_requests_pass_through() -> None:
    app = BodyLimitMiddleware(_reading_app, max_bytes=100)
    assert _call(app, [b"x" * 50, b"y" * 50], [(b"content-length", b"100")])[:2] == (200, b"100")
    sent: list[dict] = []

    async def send(m: dict) -> None:
        sent.append(m)

    async def receive() -> dict:
        return {"type": "http.request", "body": b"z" * 1000, "more_body": False}

    asyncio.run(app({"type": "http", "method": "GET", "path": "/", "headers": []}, receive, send))
    assert sent[0]["status"] == 200


def test_app_turning_the_error_into_another_status_still_answers_413() -> None:
    async def swallowing_app(scope, receive, send) -> None:
        try:
            while (await receive()).get("more_body"):
                pass
        except Exception:  # noqa: BLE001 - like a framework mapping any parse error to 400
            await send({"type": "http.response.start", "status": 400, "headers": []})
            await send({"type": "http.response.body", "body": b"bad body"})

    status, body, _ = _call(BodyLimitMiddleware(swallowing_app, max_bytes=10), [b"x" * 8] * 5, [])
    assert status == 413 and b"upload too large" in body


def test_api_key_is_checked_before_the_body_is_read() -> None:
    app = ApiKeyMiddleware(_reading_app, api_key="k3y", detail="need a key")
    status, body, pulled = _call(app, [b"x" * 10] * 5, [])
    assert (status, pulled) == (401, 0)
    assert json.loads(body) == {"detail": "need a key"}
    assert _call(app, [b"x" * 10] * 5, [(b"x-api-key", b"wrong")])[:3:2] == (401, 0)
    assert _call(app, [b"x" * 10] * 5, [(b"x-api-key", b"k3y")])[:2] == (200, b"50")


def _timed_call(app, pieces: list[tuple[float, bytes]]) -> tuple[int, dict[bytes, bytes], bytes]:
    """Like _call, but each piece of the body arrives after its delay (seconds)."""
    sent: list[dict] = []
    i = 0

    async def receive() -> dict:
        nonlocal i
        if i >= len(pieces):
            await asyncio.sleep(3600)  # a client that never sends the rest
        delay, body = pieces[i]
        i += 1
        await asyncio.sleep(delay)
        return {"type": "http.request", "body": body, "more_body": i < len(pieces)}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/upscale", "headers": []}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


def test_stalled_body_gets_408_and_a_slow_steady_one_passes() -> None:
    app = BodyLimitMiddleware(_reading_app, max_bytes=1000, idle_timeout=0.2)
    steady = [(0.1, b"x" * 10)] * 8  # 0.8 s in all, never 0.2 s without data
    assert _timed_call(app, steady)[::2] == (200, b"80")
    status, headers, body = _timed_call(app, [(0.0, b"x" * 10), (0.5, b"y")])
    assert status == 408 and headers[b"connection"] == b"close"
    assert json.loads(body)["detail"] == "upload stalled: no data for 0.2 s (the server's body timeout)"


def test_413_answered_by_the_framework_still_closes_the_connection() -> None:
    async def framework(scope, receive, send) -> None:
        try:
            while (await receive()).get("more_body"):
                pass
        except Exception as e:  # noqa: BLE001 - like FastAPI answering the HTTPException itself
            await send({"type": "http.response.start", "status": e.status_code,
                        "headers": [(b"connection", b"keep-alive")]})
            await send({"type": "http.response.body", "body": b"too big"})

    sent: list[dict] = []
    chunks = iter([b"x" * 8] * 5)

    async def receive() -> dict:
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/upscale", "headers": []}
    asyncio.run(BodyLimitMiddleware(framework, max_bytes=10)(scope, receive, send))
    assert sent[0]["status"] == 413 and sent[0]["headers"] == [(b"connection", b"close")]


def test_drip_fed_body_gets_408_at_the_rate_floor_and_the_total_cap() -> None:
    # A soak's row D: 1 byte every few seconds never tripped the idle timeout. The floor counts
    # the whole upload: 1 byte per 0.1 s is 10 B/s, under a 100 B/s floor once the grace is over.
    app = BodyLimitMiddleware(_reading_app, max_bytes=10_000, idle_timeout=5, min_rate=100, grace=0.3)
    status, headers, body = _timed_call(app, [(0.1, b"x")] * 40)
    assert status == 408 and headers[b"connection"] == b"close"
    assert "under 0.0976562 KiB/s (the server's minimum upload rate)" in json.loads(body)["detail"]
    fast = [(0.05, b"x" * 100)] * 8  # 2 KB/s: passes the floor
    assert _timed_call(app, fast)[::2] == (200, b"800")
    capped = BodyLimitMiddleware(_reading_app, max_bytes=10_000, idle_timeout=5, total_timeout=0.3)
    status, _, body = _timed_call(capped, [(0.1, b"x" * 100)] * 10)
    assert status == 408 and "not complete after 0.3 s" in json.loads(body)["detail"]
