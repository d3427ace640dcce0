"""Hostile requests against a real `sr serve` (shipped asa-base x2, 1 worker, queue 4,
SR_TIMEOUT_S=10), on loopback, one row at a time: what each costs the server and whether it
stays responsive. Prints one line per row; the figures are docs/service.md's hostile-request tables.

    PYTHONPATH=. python docs/service_probe_hostile.py [ROWS]    (e.g. F; default ABCDEFG)

A: 20,000-scan progressive JPEG with a junk byte after APP0, then a small request.
B: PNG with 3 compressed iTXt chunks of 12 MiB each.   C: 600x40 PNG, eXIf after IDAT (orientation 6),
width=2100.   D: 51 uploads drip-feeding 1 byte every 5 s, /healthz polled meanwhile.
E: a 146-byte two-iCCP PNG while four 19 MB SOI + 0xFF fill JPEGs are in flight.
F: 3 rounds of: worker and queue filled with 768x768 uploads, one more gets 503; its Retry-After
against the real wait (from the 503 until the first admitted job answers).
G: /v1/preview of a 4096^2 16-bit gray PNG and of a 16-bit RGBA one, server RSS (with its
decoder children) before/after.
The connection rows (H and I are not in the default set: run them by name):
H: 24 clients in turn ask /v1/preview of a noise PNG (a ~9 MB answer) and never read it; server RSS
before, after the 24th, and 35 s later (SR_SEND_TIMEOUT_S: 30 s by default).
I: GET /healthz declaring a 100 MB body (and POST /healthz declaring 10 MB) dribbled a byte every
3 s: how long the connection stays open after the answer.
"""

import argparse
import asyncio
import io
import os
import socket
import sys
import threading
import time

import httpx
from PIL import Image

from benchmarks import serve as b
from benchmarks.soak_hostile import dribble_unread_body

ROWS = set("".join(sys.argv[1:]).upper()) or set("ABCDEFG")
args = argparse.Namespace(device="cpu", workers=1, queue=None, threads=1)
port = b.free_port()
base = f"http://127.0.0.1:{port}"
proc = b.start_server(args, None, "asa-base", port, open(os.devnull, "w"), env={"SR_TIMEOUT_S": "10"})
b.wait_ready(proc, base, 240)


def png(w, h, mode="RGB"):
    buf = io.BytesIO()
    Image.new(mode, (w, h), 90).save(buf, format="PNG")
    return buf.getvalue()


def post(data, name="a.png", path="upscale", **fields):
    return httpx.post(f"{base}/v1/{path}", files={"file": (name, data)}, data=fields, timeout=300)


def tree_rss_mb(pid):
    return (b.tree_rss_bytes(pid) or 0) / 2**20


def timed(fn):
    t0 = time.monotonic()
    r = fn()
    return r, time.monotonic() - t0


try:
    evasive = b.evasive_payloads() if ROWS & set("ABC") else {}  # rows A to C: the soak's files

    if "A" in ROWS:
        name, junk, _, _ = evasive["A-scan-junk"]
        r, dt = timed(lambda: post(junk, name))
        s, ds = timed(lambda: post(png(64, 64)))
        print(f"A: {r.status_code} in {dt:.2f} s ({r.json()['detail'][:70]}); "
              f"next 64x64: {s.status_code} in {ds:.2f} s")

    if "B" in ROWS:
        name, itxt, _, _ = evasive["B-itxt"]
        r, dt = timed(lambda: post(itxt, name))
        print(f"B: {r.status_code} in {dt:.2f} s ({r.json()['detail'][:80]})")

    if "C" in ROWS:
        name, late, fields, _ = evasive["C-late-exif"]  # fields: width=2100
        rss0 = tree_rss_mb(proc.pid)
        r, dt = timed(lambda: post(late, name, **fields))
        print(f"C: {r.status_code} in {dt:.2f} s ({r.json()['detail'][:90]}); RSS {rss0:.0f} -> "
              f"{tree_rss_mb(proc.pid):.0f} MB")

    if "D" in ROWS:
        host = "127.0.0.1"
        socks, codes, health = [], [], []
        head = (b"POST /v1/upscale HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                b"Content-Type: multipart/form-data; boundary=b\r\n\r\n")
        for _ in range(51):
            s_ = socket.create_connection((host, port), timeout=60)
            s_.sendall(head + b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n\r\n')
            socks.append(s_)
        t_end = time.monotonic() + 20
        while time.monotonic() < t_end:
            h, dh = timed(lambda: httpx.get(f"{base}/healthz", timeout=10))
            health.append((h.status_code, dh))
            for s_ in socks:
                try:
                    s_.send(b"x")
                except OSError:
                    pass
            time.sleep(1)
        for s_ in socks:
            s_.settimeout(0.5)
            try:
                first = s_.recv(4096)
                codes.append(first.split(b" ", 2)[1].decode() if first else "closed")
            except OSError:
                codes.append("open")
            s_.close()
        r = post(png(16, 16))
        retry = list(codes)
        print(f"D: healthz {sorted({c for c, _ in health})} max {max(d for _, d in health):.2f} s over 20 s; "
              f"slow uploads answered {dict((c, retry.count(c)) for c in set(retry))}; "
              f"then a normal upload {r.status_code}")

    if "E" in ROWS:
        fill = b"\xff\xd8" + b"\xff" * (19 * 2**20) + b.scan_bomb_jpeg(64, 0)[2:]
        ts = [threading.Thread(target=lambda: post(fill, "f.jpg")) for _ in range(4)]
        for t in ts:
            t.start()
        time.sleep(1.0)
        two = b.iccp_bomb_png(2, inflated=16)
        r, dt = timed(lambda: post(two))
        for t in ts:
            t.join()
        print(f"E: {len(two)}-byte two-iCCP PNG {r.status_code} in {dt:.2f} s "
              "with four 19 MB fill JPEGs in flight")

    if "F" in ROWS:
        # jobs of about a second: Retry-After is in whole seconds (at least 1), so it cannot be
        # within 3x of a sub-second wait (384x384 jobs freed a slot after 0.23-0.27 s)
        job = png(768, 768)
        for _ in range(3):  # the work model learns this machine's current speed from a few jobs
            post(job)
        for round_ in range(3):
            answers, answered = [], threading.Event()

            def admitted(answers=answers, answered=answered):
                r = post(job)
                answers.append((time.monotonic(), r.status_code))
                answered.set()

            ts = [threading.Thread(target=admitted) for _ in range(5)]  # 1 worker + 4 queued
            for t in ts:
                t.start()
            while True:
                jobs = httpx.get(f"{base}/healthz", timeout=10).json()["jobs"]
                if jobs["running"] + jobs["waiting"] >= 5 or answered.is_set():
                    break
                time.sleep(0.02)
            r = post(job)
            refused_at = time.monotonic()
            answered.wait(120)
            waited = answers[0][0] - refused_at
            for t in ts:
                t.join()
            retry_after = int(r.headers.get("retry-after", "0"))
            print(f"F{round_ + 1}: {r.status_code} Retry-After {retry_after} s; a slot freed after "
                  f"{waited:.2f} s (ratio {retry_after / max(waited, 1e-3):.2f}); admitted: "
                  f"{sorted(c for _, c in answers)}")

    if "H" in ROWS:
        import numpy as np

        noise = io.BytesIO()
        Image.fromarray(np.random.default_rng(72).integers(0, 256, (1700, 1700, 3), dtype=np.uint8)).save(
            noise, format="PNG")
        form = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="n.png"\r\n\r\n'
                + noise.getvalue() + b"\r\n--b--\r\n")
        request = (b"POST /v1/preview HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
                   b"boundary=b\r\nContent-Length: %d\r\n\r\n" % len(form)) + form
        rss0, server0 = tree_rss_mb(proc.pid), b.rss_bytes(proc.pid) / 2**20
        held, statuses = [], []
        for _ in range(24):  # in turn, not at once: each answered, then left unread
            s_ = socket.socket()
            s_.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s_.connect(("127.0.0.1", port))
            s_.settimeout(120)
            try:
                s_.sendall(request)
            except OSError:
                pass  # refused before its body was read (the per-address upload cap): the answer follows
            try:
                first = s_.recv(4096)  # the answer has started
            except OSError:
                first = b""
            statuses.append(first.split(b" ", 2)[1].decode() if first.startswith(b"HTTP/") else "reset")
            if first.startswith(b"HTTP/1.1 200"):
                head = first.split(b"\r\n\r\n")[0].lower()
                length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
                held.append((s_, length, len(first) - len(head) - 4))
            else:
                s_.close()
        server1 = b.rss_bytes(proc.pid) / 2**20
        time.sleep(35)
        server2 = b.rss_bytes(proc.pid) / 2**20
        cut = 0
        for s_, length, got in held:  # what still arrives: the kernel's buffers, not the rest
            s_.settimeout(5)
            try:
                while chunk := s_.recv(2**20):
                    got += len(chunk)
            except OSError:
                pass
            cut += got < length
            s_.close()
        print(f"H: 24 unread ~{len(noise.getvalue()) / 2**20:.1f} MB answers: server RSS {server0:.0f} -> "
              f"{server1:.0f} MB after the 24th, {server2:.0f} MB 35 s later ({cut} of {len(held)} cut short "
              f"by the server; answers {dict((c, statuses.count(c)) for c in set(statuses))}); with decoders "
              f"{rss0:.0f} -> {tree_rss_mb(proc.pid):.0f} MB")

    if "I" in ROWS:
        for method, declared in (("GET", 100_000_000), ("POST", 10_000_000)):
            status, end = asyncio.run(dribble_unread_body(port, method, declared))
            print(f"I: {method} /healthz declaring {declared} bytes, a byte every 3 s: {status}, {end}")

    if "G" in ROWS:
        buf = io.BytesIO()
        Image.new("I;16", (4096, 4096), 1000).save(buf, format="PNG")
        for name, data in (("16-bit gray", buf.getvalue()), ("16-bit RGBA", b.rgba16_png(4096))):
            rss0 = tree_rss_mb(proc.pid)
            peak = [rss0]
            stop = threading.Event()

            def sample(stop=stop, peak=peak):
                while not stop.is_set():
                    peak.append(tree_rss_mb(proc.pid))
                    time.sleep(0.05)

            th = threading.Thread(target=sample)
            th.start()
            r, dt = timed(lambda data=data: post(data, path="preview"))
            stop.set()
            th.join()
            print(f"G: preview of a 4096^2 {name} PNG ({len(data) // 1024} KB): {r.status_code} in "
                  f"{dt:.2f} s; server+children RSS {rss0:.0f} -> peak {max(peak):.0f} -> "
                  f"{tree_rss_mb(proc.pid):.0f} MB; "
                  f"server alone {b.rss_bytes(proc.pid) / 2**20:.0f} MB")
finally:
    b.stop_process(proc)
