"""Request guards as plain ASGI middleware: they act before the request body is read.

:class:`BodyLimitMiddleware`: a declared ``Content-Length`` over the limit is refused without
reading a byte. Otherwise (chunked uploads, or a lying header) bytes are counted as they arrive and
reading stops at the first chunk past the limit, so an oversized upload never sits in memory or in
a spool file; the connection is then closed. A body that stops arriving gets 408.

:class:`ApiKeyMiddleware`: FastAPI parses a form body before it runs dependencies, so without this
a client with no key could still make the server take in a whole upload before its 401.

:func:`connection_protocol`: the body guard starts only once a request's head has arrived; before
that, uvicorn keeps a connection that sends part of its headers open forever. This is uvicorn's own
h11 protocol with a deadline on the request head (request line and headers), a drain or close for a
body the route did not read, a send timeout and a cap on the bytes a connection's answer holds in
the write buffer (with :class:`ResponsePacing`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import TYPE_CHECKING

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:  # annotations only
    from .settings import Settings

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class BodyError(Exception):
    """Raised from ``receive`` when the body breaks a limit; ``status_code`` and ``detail`` are its
    answer. The app answers it where it meets it first (:mod:`sr.service.routes.errors`: FastAPI
    wraps an error of body parsing in its generic 400, whose cause this is); this middleware answers
    one that escapes the app."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail


class UploadTooLarge(BodyError):
    def __init__(self, detail: str) -> None:
        super().__init__(413, detail)


class UploadStalled(BodyError):
    def __init__(self, detail: str) -> None:
        super().__init__(408, detail)


# Seconds of an upload before the byte-rate floor applies (connection set-up, a client's first write).
BODY_GRACE_S = 5.0


class BodyLimitMiddleware:
    """413 past ``max_bytes``; 408 when the body stops arriving for ``idle_timeout`` seconds, falls
    under ``min_rate`` bytes per second on average (after :data:`BODY_GRACE_S`), or is not complete
    within ``total_timeout`` seconds.

    The idle deadline alone let a client send 1 byte every few seconds forever:
    the floor and the cap bound the whole upload. Either answer carries ``Connection: close``,
    since the rest of the body is never read.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, detail: str | None = None,
                 idle_timeout: float | None = None, min_rate: float = 0.0,
                 total_timeout: float | None = None, grace: float = BODY_GRACE_S) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.detail = detail or f"upload too large: the limit is {max_bytes} bytes"
        self.idle_timeout = idle_timeout
        self.min_rate = min_rate
        self.total_timeout = total_timeout
        self.grace = grace

    def _wait_limit(self, started: float, received: int, now: float) -> tuple[float | None, str]:
        """(seconds the next piece may take, what to say if it does not come)."""
        limits: list[tuple[float, str]] = []
        if self.idle_timeout is not None:
            limits.append((self.idle_timeout,
                           f"no data for {self.idle_timeout:g} s (the server's body timeout)"))
        if self.total_timeout is not None:
            limits.append((started + self.total_timeout - now,
                           f"not complete after {self.total_timeout:g} s (the server's upload time limit)"))
        if self.min_rate > 0:
            # By time t the client must have sent min_rate * (t - grace) bytes.
            limits.append((started + self.grace + received / self.min_rate - now,
                           f"arriving at under {self.min_rate / 1024:g} KiB/s "
                           "(the server's minimum upload rate)"))
        if not limits:
            return None, ""
        return min(limits, key=lambda x: x[0])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _ambiguous_framing(scope):
            # Both say where the body ends; h11 follows Transfer-Encoding, a proxy in front may
            # follow Content-Length: the bytes between are request smuggling. nginx answers 400.
            await send_json_error(send, 400, "Content-Length and Transfer-Encoding together: the body's "
                                             "length is ambiguous; send one of them")
            return
        if scope["type"] != "http" or scope.get("method") not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await send_json_error(send, 413, self.detail)
            return

        received = 0
        body_done = False
        failure: BodyError | None = None
        started = False     # the app's response went out
        replaced = False    # we answered in place of the app's response
        loop = asyncio.get_running_loop()
        body_start = loop.time()

        async def guarded_receive() -> Message:
            nonlocal received, body_done, failure
            if failure is not None:
                raise failure
            wait, why = (None, "") if body_done else self._wait_limit(body_start, received, loop.time())
            if wait is None:
                message = await receive()  # after the body: disconnect polling, no deadline
            else:
                try:
                    message = await asyncio.wait_for(receive(), max(wait, 0.0))
                except asyncio.TimeoutError:
                    failure = UploadStalled(f"upload stalled: {why}")
                    raise failure from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_bytes:
                    failure = UploadTooLarge(self.detail)
                    raise failure
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started, replaced
            if replaced:
                return
            if message["type"] == "http.response.start" and failure is not None:
                if message["status"] != failure.status_code:
                    # Some layer turned our exception into another error (e.g. a generic 400): say ours.
                    replaced = True
                    await send_json_error(send, failure.status_code, failure.detail)
                    return
                # The framework answered our error itself: the unread rest of the body rules out reuse.
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except BodyError as e:
            if started or replaced:
                raise
            await send_json_error(send, e.status_code, e.detail)


class ApiKeyMiddleware:
    """401 for requests under ``prefix`` without the right ``X-API-Key``, before any body is read."""

    def __init__(self, app: ASGIApp, api_key: str, detail: str, prefix: str = "/v1/") -> None:
        self.app = app
        self.key = api_key.encode()
        self.detail = detail
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith(self.prefix) \
                and scope.get("method") != "OPTIONS":  # CORS preflights carry no key
            given = next((v for k, v in scope.get("headers", []) if k == b"x-api-key"), b"")
            if not secrets.compare_digest(given, self.key):
                await send_json_error(send, 401, self.detail, [(b"www-authenticate", b"ApiKey")])
                return
        await self.app(scope, receive, send)


async def send_json_error(send: Send, status: int, detail: str,
                          headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            # The request body (if any) is never read: the connection cannot be reused.
            (b"connection", b"close"),
            *(headers or []),
        ],
    })
    await send({"type": "http.response.body", "body": body})


def _ambiguous_framing(scope: Scope) -> bool:
    names = {key for key, _ in scope.get("headers", [])}
    return b"content-length" in names and b"transfer-encoding" in names


class ResponsePacing:
    """Response bodies sent in pieces of at most ``piece`` bytes. uvicorn writes each body message
    whole into the connection's write buffer; in pieces, its send waits for the client to read
    before the next one (the write buffer's high-water mark, :func:`connection_protocol`), so a
    connection holds at most about ``2 x piece`` bytes there, and an answer its client never reads
    is dropped by the send timeout instead of sitting buffered (24 unread 9 MB answers)."""

    def __init__(self, app: ASGIApp, piece: int) -> None:
        self.app = app
        self.piece = piece

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def paced_send(message: Message) -> None:
            body = message.get("body", b"")
            if message["type"] != "http.response.body" or len(body) <= self.piece:
                await send(message)
                return
            more = message.get("more_body", False)
            view = memoryview(body)
            for start in range(0, len(body), self.piece):
                end = start + self.piece
                await send({"type": "http.response.body", "body": bytes(view[start:end]),
                            "more_body": more or end < len(body)})

        await self.app(scope, receive, paced_send)


def _content_length(scope: Scope) -> int | None:
    return _content_length_of(scope.get("headers", []))


# A body the route did not read (GET /healthz with a declared 100 MB body dribbled 1 byte every
# 3 s, POST /healthz's 405): up to this many bytes are read and dropped after the response,
# within the body timeout, so that the connection can serve its next request. A bigger rest is not
# worth reading: the connection is closed after the response.
DRAIN_MAX_BYTES = 64 * 1024
# Closing a socket with unread input sends an RST, which can destroy the response still on its way
# to the client. So the connection is half-closed first (FIN after the response), and what the client
# still sends is dropped unread for at most this long before the socket is closed (nginx's
# lingering close).
LINGER_S = 2.0
# How often a stuck response is checked, as a fraction of the send timeout.
SEND_CHECKS_PER_TIMEOUT = 4


class _ConnectionProtocol(H11Protocol):
    """uvicorn's h11 protocol with the connection limits the app cannot see:

    - a request head not complete within ``header_timeout`` seconds of its first byte (or of the
      connection, for one that sends nothing) gets 408 and the connection closed;
    - a request body the route did not read is drained after the response, at most
      :data:`DRAIN_MAX_BYTES` within ``body_timeout`` seconds, else the connection is closed (half
      closed, then closed after :data:`LINGER_S`);
    - at most ``max_buffered`` bytes of a response wait in the write buffer (the transport's high-water
      mark, with :class:`ResponsePacing` cutting bodies in pieces), and a response that makes no
      progress for ``send_timeout`` seconds is aborted: the connection is reset and its buffer freed.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    send_timeout: float = 30.0
    max_buffered: int = 2**20

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # asyncio pauses the writer (uvicorn's send waits) past the high-water mark; the low one is
        # a quarter of it. Half the cap: ResponsePacing's pieces are the other half.
        transport.set_write_buffer_limits(high=self.max_buffered // 2)
        self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(self.header_timeout,
                                                                            self._head_timed_out)
        self._drain_timer: asyncio.TimerHandle | None = None
        self._drained = 0
        self._lingering = False
        self._linger_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._send_progress = (0.0, 0)  # (when the write buffer last shrank, its size then)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the answer went out and the connection is closing: the rest is dropped unread
        if self._drain_timer is not None:
            self._drained += len(data)
            if self._drained > DRAIN_MAX_BYTES:
                self._close_after_response()
                return
        if self._head_timer is None and self.conn.their_state is h11.IDLE:  # a new request begins
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)
        super().data_received(data)
        if self._drain_timer is not None and self.conn.their_state is not h11.SEND_BODY:
            self._cancel(self._drain_timer)  # the unread body ended: the connection goes on
            self._drain_timer = None

    def on_response_complete(self) -> None:
        self._cancel_head_timer()  # the next request on this connection gets its own deadline
        self._watch_send()         # also for an answer that closes the connection: close() flushes first
        super().on_response_complete()
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        # The route answered without reading the whole body.
        declared = _content_length_of(self.headers or [])
        if declared is None or declared > DRAIN_MAX_BYTES:
            self._close_after_response()
        else:
            self._drained = 0
            self._drain_timer = self.loop.call_later(self.body_timeout, self._close_after_response)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_send()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        for timer in (self._drain_timer, self._linger_timer, self._send_timer):
            self._cancel(timer)
        self._drain_timer = self._linger_timer = self._send_timer = None
        super().connection_lost(exc)

    @staticmethod
    def _cancel(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _close_after_response(self) -> None:
        """Half-close now (the response is out, or queued before the FIN), drop what still comes,
        close after :data:`LINGER_S`."""
        self._cancel(self._drain_timer)
        self._drain_timer = None
        if self._lingering or self.transport.is_closing():
            return
        self._lingering = True
        self._unset_keepalive_if_required()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger_timer = self.loop.call_later(LINGER_S, self.transport.close)

    def _watch_send(self) -> None:
        """Start watching the write buffer, if it holds anything: :meth:`_check_send`."""
        size = self.transport.get_write_buffer_size()
        if self._send_timer is None and size > 0:
            self._send_progress = (self.loop.time(), size)
            self._send_timer = self.loop.call_later(self.send_timeout / SEND_CHECKS_PER_TIMEOUT,
                                                    self._check_send)

    def _check_send(self) -> None:
        """Abort the connection when its write buffer has not shrunk for ``send_timeout`` seconds."""
        self._send_timer = None
        size = self.transport.get_write_buffer_size()
        if size == 0:
            return
        now = self.loop.time()
        since, last = self._send_progress
        if size < last:
            self._send_progress = (now, size)
        elif now - since >= self.send_timeout:
            who = f"{self.client[0]}:{self.client[1]}" if self.client else "client"
            self.logger.info("%s: answer not read for %g s (the server's send timeout): %d bytes dropped, "
                             "connection reset", who, self.send_timeout, size)
            self.transport.abort()  # drops the buffer; uvicorn's send returns at once (disconnected)
            return
        self._send_timer = self.loop.call_later(self.send_timeout / SEND_CHECKS_PER_TIMEOUT,
                                                self._check_send)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing() or self._lingering:
            return  # the head arrived: the body has its own guard (BodyLimitMiddleware)
        body = json.dumps({"detail": f"request headers incomplete after {self.header_timeout:g} s "
                                     "(the server's header timeout)"}).encode()
        # Written raw: h11 will not send a response to a request it has not seen.
        self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                             b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        self.transport.close()


def _content_length_of(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared Content-Length of lower-cased request headers; None when absent or unreadable."""
    for key, value in headers:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def connection_protocol(settings: Settings) -> type[H11Protocol]:
    """The protocol class to give uvicorn (``Config(http=...)``): the connection limits of
    ``settings`` (head and body timeouts, send timeout, buffered bytes per connection)."""
    return type("ConnectionProtocol", (_ConnectionProtocol,), {
        "header_timeout": settings.header_timeout_s, "body_timeout": settings.body_timeout_s,
        "send_timeout": settings.send_timeout_s, "max_buffered": settings.max_buffered_bytes})

