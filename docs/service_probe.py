"""The service's admission and decode guards against a real `sr serve` (shipped asa-base x2, 1 worker,
queue 4, SR_TIMEOUT_S=10), on loopback.

    PYTHONPATH=. python docs/service_probe.py

A scan-bomb JPEG then a small request; three iCCP-bomb PNGs with a fast 422 sent meanwhile; jobs the
work model must refuse; Retry-After against the real drain of a full queue; a connection stalled in
its headers. Prints one line each (the figures are in docs/service.md).
"""

import argparse
import io
import os
import socket
import threading
import time

import httpx
import numpy as np
from PIL import Image

from benchmarks import serve as b

args = argparse.Namespace(device="cpu", workers=1, queue=None, threads=1)
port = b.free_port()
base = f"http://127.0.0.1:{port}"
proc = b.start_server(args, None, "asa-base", port, open(os.devnull, "w"), env={"SR_TIMEOUT_S": "10"})
b.wait_ready(proc, base, 180)


def png(w, h, noise=False):
    buf = io.BytesIO()
    arr = np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8) if noise else None
    (Image.fromarray(arr) if noise else Image.new("RGB", (w, h), (90, 120, 150))).save(buf, format="PNG")
    return buf.getvalue()


def post(data, name="a.png", **fields):
    return httpx.post(f"{base}/v1/upscale", files={"file": (name, data)}, data=fields, timeout=300)


try:
    small = png(64, 64, noise=True)
    bomb = b.scan_bomb_jpeg(4096, 3000)
    t0 = time.monotonic()
    r = post(bomb, "bomb.jpg")
    t1 = time.monotonic()
    s = post(small)
    t2 = time.monotonic()
    print(f"scan bomb: {r.status_code} in {t1-t0:.3f} s ({r.json()['detail'][:80]}); "
          f"small request {s.status_code} "
          f"done {t2-t0:.3f} s after the bomb's arrival")

    icc = b.iccp_bomb_png(1200)
    codes = []
    ts = [threading.Thread(target=lambda: codes.append(post(icc, "icc.png").status_code)) for _ in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    r = post(png(16, 16), width="9000")
    dt = time.monotonic() - t0
    for t in ts:
        t.join()
    print(f"iCCP bombs ({len(icc)/1e6:.1f} MB, 1200 chunks) x3: {sorted(codes)}; "
          f"width=9000 -> {r.status_code} in {dt:.3f} s")

    for label, data, fields in (("2048x2048 x2 tta", png(2048, 2048), {"tta": "true"}),
                                ("2,000,000x1 strip", png(2_000_000, 1), {}),
                                ("4096x4096 PNG", png(4096, 4096), {})):
        t0 = time.monotonic()
        r = post(data, **fields)
        print(f"{label}: {r.status_code} in {time.monotonic()-t0:.3f} s: {r.json()['detail']}")

    # Retry-After against the real drain: fill the worker and the queue of 4 with 384x384 jobs.
    job = png(384, 384, noise=True)
    for _ in range(2):
        post(job)  # teach the model this job size
    done = []
    ts = [threading.Thread(target=lambda: done.append((post(job).status_code, time.monotonic())))
          for _ in range(5)]
    for t in ts:
        t.start()
    while sum(httpx.get(f"{base}/healthz").json()["jobs"][k] for k in ("running", "waiting")) < 5:
        time.sleep(0.01)  # all five admitted: one running, four waiting
    t0 = time.monotonic()
    r = post(job)
    for t in ts:
        t.join()
    drain = max(t for _, t in done) - t0
    print(f"Retry-After {r.headers.get('retry-after')} s ({r.status_code}: {r.json()['detail']}); "
          f"real drain {drain:.1f} s; statuses {[c for c, _ in done]}")

    host, p = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(p)), timeout=30)
    sock.sendall(b"POST /v1/upscale HTTP/1.1\r\nHost: x\r\nContent-Ty")
    t0 = time.monotonic()
    first = sock.recv(200)
    dt = time.monotonic() - t0
    line = first.splitlines()[0].decode() if first else '(closed)'
    print(f"stalled headers: {line} after {dt:.1f} s")
finally:
    b.stop_process(proc)
