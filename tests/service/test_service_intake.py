"""Admission before work: upload caps answered as JSON 503 before the body is read, a
liveness probe that is never starved, and small uploads checked on their own lane."""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import time

import httpx
import pytest
from PIL import Image

from sr.io import DecodeLimitError
from sr.service.intake import SMALL_UPLOAD_BYTES, Intake


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (90, 120, 150)).save(buf, "PNG")
    return buf.getvalue()


def _two_iccp_png() -> bytes:
    """A 146-byte-class PNG with two ICC profiles: refused by the pre-check in microseconds."""
    from benchmarks.serve import iccp_bomb_png

    return iccp_bomb_png(2, inflated=16)


def test_small_bad_upload_does_not_wait_behind_the_large_lane() -> None:
    intake = Intake(memory_bytes=512 * 2**20, cpu_s=2, wall_s=10)
    intake.start()
    intake.wait_ready()
    release = threading.Event()

    async def main() -> None:
        # Eight big hostile uploads hold the large lane (a stand-in that simply does not finish).
        blockers = [asyncio.ensure_future(intake.large.call(release.wait, 30)) for _ in range(8)]
        try:
            bad = _two_iccp_png()
            assert len(bad) <= SMALL_UPLOAD_BYTES
            t0 = time.monotonic()
            with pytest.raises(DecodeLimitError, match="more than one ICC profile"):
                await intake.probe(bad, None)
            assert time.monotonic() - t0 < 1.0
            assert (await intake.probe(_png(20, 10), None)).width == 20
        finally:
            release.set()
            await asyncio.gather(*blockers)

    try:
        asyncio.run(main())
    finally:
        intake.close()


def _hold_upload(base: str) -> socket.socket:
    """An upload whose head and first bytes arrived, then nothing (a slow client)."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(b"POST /v1/upscale HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n"
                 b"Content-Type: multipart/form-data; boundary=b\r\n\r\n--b\r\n")
    return sock


def test_uploads_over_the_per_client_cap_get_json_503_and_healthz_keeps_answering(make_server) -> None:
    base = make_server(max_uploads_per_client=2, body_timeout_s=30)
    held = [_hold_upload(base), _hold_upload(base)]
    try:
        deadline = time.monotonic() + 10
        while httpx.get(f"{base}/healthz").json()["uploads"]["uploads"] < 2:
            assert time.monotonic() < deadline, "the held uploads never arrived"
            time.sleep(0.02)
        r = httpx.post(f"{base}/v1/upscale", files={"file": ("a.png", _png(16, 16))}, timeout=10)
        assert r.status_code == 503 and r.headers["content-type"] == "application/json"
        assert "2 uploads from your address" in r.json()["detail"]
        assert int(r.headers["retry-after"]) >= 1
        t0 = time.monotonic()
        health = httpx.get(f"{base}/healthz", timeout=5)
        assert health.status_code == 200 and time.monotonic() - t0 < 2
        assert health.json()["uploads"]["refused"] == 1
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while httpx.get(f"{base}/healthz").json()["uploads"]["uploads"]:
        assert time.monotonic() < deadline, "closed uploads still counted"
        time.sleep(0.05)
    r = httpx.post(f"{base}/v1/upscale", files={"file": ("a.png", _png(16, 16))}, timeout=30)
    assert r.status_code == 200
