"""BodyLimitMiddleware on raw ASGI: refuses on Content-Length, stops reading past the limit."""

from __future__ import annotations

import asyncio
import json

from service.limits import ApiKeyMiddleware, BodyLimitMiddleware


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
