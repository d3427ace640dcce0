"""Cheap requests that would buy long work are refused up front, and cheap checks stay fast.

Hostile files are refused from their structure before any decode (scan bombs, metadata bombs), a job
the work model predicts to overrun the time limit gets an immediate 422, and a request that only
needs a header read is answered while bombs are being handled.
"""

from __future__ import annotations

import io
import threading
import time

import httpx
from PIL import Image

from benchmarks.serve import iccp_bomb_png, scan_bomb_jpeg


def _post(client, data: bytes, name: str = "photo.png", **fields):
    return client.post("/v1/upscale", files={"file": (name, data, "application/octet-stream")},
                       data={k: str(v) for k, v in fields.items()})


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (90, 120, 150)).save(buf, format="PNG")
    return buf.getvalue()


def test_scan_bomb_is_refused_and_the_next_small_request_is_served_within_20_s(make_client) -> None:
    client = make_client(workers=1, max_queue=0, timeout_s=10)
    bomb = scan_bomb_jpeg(4096, 3000)  # 165 KB; minutes of decoding for Pillow
    t0 = time.monotonic()
    r = _post(client, bomb, "bomb.jpg")
    assert r.status_code == 422 and "over 100 scans" in r.json()["detail"], r.text
    assert _post(client, _png(24, 20)).status_code == 200
    assert time.monotonic() - t0 < 20
    assert client.get("/healthz").json()["jobs"]["completed"] == 1  # the bomb never took a worker
    r = client.post("/v1/preview", files={"file": ("bomb.jpg", bomb)})
    assert r.status_code == 422 and "scans" in r.json()["detail"]


def test_fast_422_stays_fast_while_icc_bombs_are_handled(make_server) -> None:
    base = make_server(workers=1, max_queue=4)
    bomb = iccp_bomb_png(200)  # 3.3 MB, 200 profiles of 16 MiB each: ~10 s of inflating for Pillow
    answers: list[int] = []

    def send_bomb() -> None:
        r = httpx.post(f"{base}/v1/upscale", files={"file": ("bomb.png", bomb)}, timeout=120)
        answers.append(r.status_code)

    senders = [threading.Thread(target=send_bomb) for _ in range(3)]
    for t in senders:
        t.start()
    time.sleep(0.2)  # the bombs are on their way
    t0 = time.monotonic()
    r = httpx.post(f"{base}/v1/upscale", files={"file": ("small.png", _png(16, 16))}, data={"width": "9000"},
                   timeout=30)
    elapsed = time.monotonic() - t0
    for t in senders:
        t.join(120)
    assert r.status_code == 422 and "SR_MAX_OUTPUT_PIXELS" in r.json()["detail"]
    assert elapsed < 1.0, elapsed
    assert answers == [422, 422, 422]


def test_job_predicted_to_overrun_the_time_limit_is_refused_at_once(make_client, make_image) -> None:
    client = make_client(timeout_s=3)
    model = client.app.state.service.pool.model
    model.fixed_factor = model.forward_factor = model.mp_factor = 1.0  # the priors (asa-base, 2 cores)
    model.taught = 0.0  # nothing measured: the priors as they are, no extrapolation margin
    t0 = time.monotonic()
    r = _post(client, make_image(512, 512), scale=2, tta="true")  # 8.4 MP through the network
    assert r.status_code == 422 and time.monotonic() - t0 < 3
    detail = r.json()["detail"]
    assert "needs about 11 s" in detail and "time limit of 3 s" in detail and "tta off" in detail, detail
    # A 100000x1 strip is only 0.4 MP of output, but ~200 tiles: each a whole network forward.
    r = _post(client, _png(100_000, 1), scale=2)
    assert r.status_code == 422 and "202 network forwards" in r.json()["detail"], r.text
    assert _post(client, make_image(64, 48), scale=2).status_code == 200
    assert client.get("/healthz").json()["jobs"]["completed"] == 1
