"""A hostile soak: rounds of clients against a loopback ``sr serve``, half of them sending normal
uploads (and obeying Retry-After), half a hostile mix: files that are slow to parse or refuse,
absurd numbers in the form, connections that leave a body or an answer unread, beside the decode
bombs and evasive uploads of ``sr bench serve --soak``. It shows whether the server stays
responsive, and its memory flat, under both at once. Loopback only; nothing leaves the machine.

    PYTHONPATH=. python -m benchmarks.soak_hostile [--seconds 120] [--rounds 2] [--clients 8] [--json F]

The server: shipped asa-base x2 on the CPU, 1 worker, queue 4, 1 thread, ``SR_TIMEOUT_S=30``, header
and body timeouts of 5 s and ``SR_SEND_TIMEOUT_S=5`` (so that what a round leaves behind is
answered or dropped within the 30 s the RSS is given to settle). It reports, per round: the answers
by kind and status, 5xx other than the admission's deliberate 503s (JSON, with Retry-After), the
/healthz latency (p50, p95, max; polled every 0.2 s throughout), the RSS of the server and of the
server with its decoder processes (at the round's start, its peak, its end, and 30 s after), and
the normal clients' waits from a first 503 to admission over that 503's Retry-After. It exits 1 when
a round has an unexpected 5xx, an RSS 30 s after over 110 % of the start, or a /healthz p95 of
50 ms or more.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import json
import multiprocessing
import os
import random
import socket
import struct
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from benchmarks import serve as bench

SERVER_ENV = {"SR_TIMEOUT_S": "30", "SR_HEADER_TIMEOUT_S": "5", "SR_BODY_TIMEOUT_S": "5",
              "SR_SEND_TIMEOUT_S": "5"}
SETTLE_S = 30.0          # after a round, before its "after" RSS
HEALTH_EVERY_S = 0.2
RSS_EVERY_S = 0.5
DRIBBLE_EVERY_S = 3.0    # the unread-body client: a byte every 3 s, inside the 5 s body timeout
CL_AND_CHUNKED = (b"POST /v1/upscale HTTP/1.1\r\nHost: soak\r\nContent-Length: 5\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
CONNECTION_KINDS = ("GET-healthz-unread-body", "POST-healthz-unread-body", "unread-9mb-answer")
BIG = 19 * 2**20


# --- the files -------------------------------------------------------------------------------------

def _png(w: int, h: int, mode: str = "RGB", noise: bool = False, seed: int = 0) -> bytes:
    import numpy as np
    from PIL import Image

    if noise:
        rng = np.random.default_rng(seed)
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    else:
        img = Image.new(mode, (w, h), 90)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _tiff_chain(prefix: bytes, ifds: int) -> bytes:
    """A TIFF of ``ifds`` empty directories, each pointing at the next (Pillow's page count walks them
    in quadratic time), under one of the magic numbers Pillow accepts."""
    endian = "<" if prefix.startswith(b"II") else ">"
    nexts = [8 + 6 * (i + 1) for i in range(ifds - 1)] + [0]
    body = b"".join(struct.pack(endian + "HI", 0, n) for n in nexts)
    return prefix + struct.pack(endian + "I", 8) + body


def _float_tiff() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("F", (32, 32), 0.5).save(buf, format="TIFF")
    return buf.getvalue()


def _animated_gif(frames: int = 200) -> bytes:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(8)  # frames that differ: Pillow merges identical ones
    images = [Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8), "L") for _ in range(frames)]
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:])
    data = buf.getvalue()
    return data[:13] + b"\x00" + data[13:]  # one junk byte after the screen descriptor


def files() -> dict[str, tuple[str, bytes, dict[str, str]]]:
    """kind -> (file name, bytes, form fields): the uploads of the hostile mix."""
    pnm_comments = b"P1\n8 8\n" + b"#\n" * (2 * 2**20) + b"0 1 " * 16  # 4 MB: 40 s in Pillow
    pgm = b"P5\n#" + b"x" * BIG + b"\n64 64\n255\n" + bytes(64 * 64)     # 19 MB header comment
    bad_ifd = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 1) + struct.pack("<HHII", 259, 3, 1, 1) \
        + struct.pack("<I", 10_000)
    small = _png(64, 64)
    mix = {
        "pnm-comments": ("c.pbm", pnm_comments, {}),
        "pgm-19mb-comment": ("big.pgm", pgm, {}),
        "tiff-chain-MM*0": ("chain.tif", _tiff_chain(b"MM\x2a\x00", 60_000), {}),
        "tiff-chain-II0*": ("chain.tif", _tiff_chain(b"II\x00\x2a", 60_000), {}),
        "tiff-bad-next-ifd": ("bad.tif", bad_ifd + bytes(124 - len(bad_ifd)), {}),
        "float-tiff": ("f.tif", _float_tiff(), {}),
        "gif-junk-byte": ("a.gif", _animated_gif(), {}),
        "over-max-pixels": ("huge.png", _png(4097, 4097, "L"), {}),
        "outscale-1e308": ("a.png", small, {"outscale": "1e308"}),
        "width-401-digits": ("a.png", small, {"width": "1" + "0" * 400}),
        "filename-10kb": ("a" * 10_000 + ".png", small, {}),
    }
    mix.update({k: v[:3] for k, v in bench.evasive_payloads().items() if k != "G-preview"})
    mix.update({k: v[:3] for k, v in bench.hostile_payloads().items() if k in ("scan-bomb", "icc-bomb")})
    return mix


def _random_fields(rng: random.Random) -> dict[str, str]:
    pick = ("1e308", "nan", "-inf", "1" + "0" * 400, "0", "-3", "2.5", "16385", "\uff12", "0x10", "4")
    return {f: rng.choice(pick) for f in rng.sample(("scale", "outscale", "width", "height", "quality",
                                                     "denoise", "look"), 2)}


# --- raw connections -----------------------------------------------------------------------------

async def _open(port: int, rcvbuf: int | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (bench.HOST, port))
    return await asyncio.open_connection(sock=sock)


async def _status(reader: asyncio.StreamReader, timeout: float = 60) -> tuple[int | str, bytes]:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except (asyncio.IncompleteReadError, asyncio.TimeoutError, OSError) as e:
        return f"error:{type(e).__name__}", b""
    parts = head.split(b" ", 2)
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else "error:no-status"), head.lower()


async def dribble_unread_body(port: int, method: str, declared: int = 10_000_000) -> tuple[int | str, str]:
    """``method`` /healthz declaring a ``declared``-byte body that the route never reads, a byte every
    DRIBBLE_EVERY_S for up to 60 s: (status, how the connection ended). A server that waits for the
    rest of the body before it closes holds the connection as long as the client keeps dribbling."""
    reader, writer = await _open(port)
    t0 = time.monotonic()
    try:
        head = f"{method} /healthz HTTP/1.1\r\nHost: soak\r\nContent-Length: {declared}\r\n\r\n"
        writer.write(head.encode() + b"x")
        status, _ = await _status(reader)
        while time.monotonic() - t0 < 60:
            try:
                if await asyncio.wait_for(reader.read(65536), DRIBBLE_EVERY_S) == b"":
                    return status, f"closed after {time.monotonic() - t0:.1f} s"
            except asyncio.TimeoutError:
                pass
            except OSError:
                return status, f"reset after {time.monotonic() - t0:.1f} s"
            writer.write(b"x")
        return status, "open after 60 s"
    finally:
        writer.close()


async def unread_answer(port: int, body: bytes, send_timeout: float) -> tuple[int | str, str]:
    """/v1/preview of a noise PNG (an answer of ~9 MB) whose answer is never read: the
    server must drop it after its send timeout instead of holding the upload's slot and buffers."""
    boundary = "soakboundary"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"n.png\"\r\n"
            "Content-Type: image/png\r\n\r\n").encode() + body + f"\r\n--{boundary}--\r\n".encode()
    reader, writer = await _open(port, rcvbuf=4096)
    try:
        writer.write(f"POST /v1/preview HTTP/1.1\r\nHost: soak\r\nContent-Type: multipart/form-data; "
                     f"boundary={boundary}\r\nContent-Length: {len(form)}\r\n\r\n".encode() + form)
        status, head = await _status(reader)
        if status != 200:
            shed = status == 503 and b"retry-after" in head and b"application/json" in head
            return status, "deliberate" if shed else "no answer to leave unread"
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.startswith(b"content-length")))
        await asyncio.sleep(2 * send_timeout + 1)  # not reading
        got = 0
        try:
            while chunk := await asyncio.wait_for(reader.read(2**20), 30):
                got += len(chunk)
        except (OSError, asyncio.TimeoutError):
            pass
        return status, "dropped by the server" if got < length else "delivered whole"
    finally:
        writer.close()


async def raw_once(port: int, payload: bytes) -> tuple[int | str, str]:
    """(status, "deliberate" for the admission's JSON 503 with Retry-After) of one raw request."""
    reader, writer = await _open(port)
    try:
        writer.write(payload)
        status, head = await _status(reader, 30)
        shed = status == 503 and b"retry-after" in head and b"application/json" in head
        return status, "deliberate" if shed else ""
    finally:
        writer.close()


# --- clients -------------------------------------------------------------------------------------

class Round:
    def __init__(self) -> None:
        self.answers: list[tuple[str, int | str, float, str]] = []  # kind, status, seconds, note
        self.health: list[float] = []
        self.health_bad: Counter = Counter()
        self.waits: list[float] = []  # real wait / Retry-After, normal clients

    def add(self, kind: str, status: int | str, seconds: float, note: str = "") -> None:
        self.answers.append((kind, status, seconds, note))


async def normal_client(base: str, rnd: Round, deadline: float, seed: int) -> None:
    rng = random.Random(seed)
    uploads = [("n.png", _png(64, 64, noise=True, seed=seed)),
               ("n.png", _png(128, 96, noise=True, seed=seed)),
               ("n.jpg", bench.image_bytes(96, "JPEG", seed))]
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        while time.monotonic() < deadline:
            name, data = rng.choice(uploads)
            first: tuple[float, int] | None = None
            t0 = time.monotonic()
            while True:
                tried = time.monotonic()
                try:
                    r = await client.post("/v1/upscale", files={"file": (name, data)}, data={"format": "png"})
                except httpx.HTTPError as e:
                    rnd.add("normal", f"error:{type(e).__name__}", time.monotonic() - t0)
                    break
                retry = bench.retry_delay(r.headers.get("retry-after")) if r.status_code == 503 else None
                if retry is None or time.monotonic() + retry > deadline:
                    if first is not None and r.status_code != 503:
                        rnd.waits.append((tried - first[0]) / first[1])
                    rnd.add("normal", r.status_code, time.monotonic() - t0, _deliberate(r))
                    break
                first = first or (tried, int(retry))
                await asyncio.sleep(retry)


def _deliberate(r: httpx.Response) -> str:
    """"deliberate" for the admission's JSON 503 with Retry-After (load shedding, by design)."""
    if r.status_code == 503 and "retry-after" in r.headers and r.headers.get("content-type", "").startswith(
            "application/json"):
        return "deliberate"
    return ""


async def hostile_client(base: str, port: int, rnd: Round, deadline: float, seed: int,
                         mix: dict[str, tuple[str, bytes, dict[str, str]]], noise: bytes) -> None:
    rng = random.Random(seed)
    calls: list[tuple[str, Callable[[], Awaitable[tuple[int | str, str]]]]] = []
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        async def upload(kind: str, fields: dict[str, str] | None = None) -> tuple[int | str, str]:
            name, data, form = mix[kind]
            r = await client.post("/v1/upscale", files={"file": (name, data)}, data=fields or form)
            return r.status_code, _deliberate(r) or r.text[:80]

        for kind in mix:
            calls.append((kind, lambda kind=kind: upload(kind)))
        calls += [
            ("random-numbers", lambda: upload("outscale-1e308", _random_fields(rng))),
            ("GET-healthz-unread-body", lambda: dribble_unread_body(port, "GET")),
            ("POST-healthz-unread-body", lambda: dribble_unread_body(port, "POST")),
            ("unread-9mb-answer", lambda: unread_answer(port, noise, float(SERVER_ENV["SR_SEND_TIMEOUT_S"]))),
            ("cl-and-chunked", lambda: raw_once(port, CL_AND_CHUNKED)),
            *((k, lambda payload=payload: raw_once(port, payload))
              for k, (payload, _) in bench.RAW_REQUESTS.items()),
        ]
        rng.shuffle(calls)
        for kind, call in itertools.cycle(calls):
            if time.monotonic() >= deadline:
                return
            t0 = time.monotonic()
            try:
                status, note = await call()
            except (httpx.HTTPError, OSError) as e:
                status, note = f"error:{type(e).__name__}", ""
            rnd.add(kind, status, time.monotonic() - t0, note)


def poll_health(base: str, stop: Any, out: Any) -> None:
    """/healthz every HEALTH_EVERY_S until ``stop`` is set, then (latencies, failures) to ``out``. In a
    process of its own: in the clients' event loop, building 19 MB forms delayed the polls themselves
    (a p95 of 63 ms that was partly the client's)."""
    latencies: list[float] = []
    failures: Counter = Counter()
    with httpx.Client(base_url=base, timeout=10) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                r = client.get("/healthz")
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    failures[r.status_code] += 1
            except httpx.HTTPError as e:
                failures[type(e).__name__] += 1
            stop.wait(HEALTH_EVERY_S)
    out.send((latencies, dict(failures)))


async def rss_sampler(pid: int, samples: list[tuple[int, int]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        samples.append((bench.rss_bytes(pid) or 0, bench.tree_rss_bytes(pid) or 0))
        try:
            await asyncio.wait_for(stop.wait(), RSS_EVERY_S)
        except asyncio.TimeoutError:
            pass


async def one_round(base: str, port: int, pid: int, seconds: float, clients: int, mix: dict, noise: bytes,
                    seed: int, health_stop: Any, settle: float = SETTLE_S) -> dict[str, Any]:
    rnd = Round()
    start = (bench.rss_bytes(pid) or 0, bench.tree_rss_bytes(pid) or 0)
    samples: list[tuple[int, int]] = []
    stop = asyncio.Event()
    sampler = asyncio.ensure_future(rss_sampler(pid, samples, stop))
    deadline = time.monotonic() + seconds
    normal = clients // 2
    await asyncio.gather(
        *(normal_client(base, rnd, deadline, seed + i) for i in range(normal)),
        *(hostile_client(base, port, rnd, deadline, seed + 100 + i, mix, noise)
          for i in range(clients - normal)))
    end_of_load = (bench.rss_bytes(pid) or 0, bench.tree_rss_bytes(pid) or 0)  # the last clients' end
    await asyncio.sleep(settle)
    stop.set()
    health_stop.set()
    await sampler
    after = (bench.rss_bytes(pid) or 0, bench.tree_rss_bytes(pid) or 0)
    peak = (max(s[0] for s in samples), max(s[1] for s in samples))
    return {"rnd": rnd, "rss": {"start": start, "peak": peak, "end_of_load": end_of_load, "after": after}}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(n: int, result: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    rnd: Round = result["rnd"]
    by_kind: dict[str, Counter] = defaultdict(Counter)
    longest: dict[str, float] = defaultdict(float)
    notes: dict[str, Counter] = defaultdict(Counter)
    bad_5xx = deliberate = 0
    for kind, status, seconds, note in rnd.answers:
        by_kind[kind][str(status)] += 1
        longest[kind] = max(longest[kind], seconds)
        if kind in CONNECTION_KINDS and note:
            notes[kind][note.split(" after ")[0]] += 1
            if " after " in note:
                longest[kind + " (held s)"] = max(longest[kind + " (held s)"], float(note.split()[-2]))
        if isinstance(status, int) and status >= 500:
            if status == 503 and note == "deliberate":
                deliberate += 1
            else:
                bad_5xx += 1
    mb = 2**20
    rss = result["rss"]
    out = {
        "round": n,
        "requests": len(rnd.answers),
        "unexpected_5xx": bad_5xx,
        "deliberate_503": deliberate,
        "statuses": {k: dict(v) for k, v in sorted(by_kind.items())},
        "connection_outcomes": {k: dict(v) for k, v in notes.items()},
        "longest_s": {k: round(v, 2) for k, v in sorted(longest.items())},
        "healthz_ms": {"n": len(rnd.health), "p50": round(_pct(rnd.health, 0.5) * 1e3, 1),
                       "p95": round(_pct(rnd.health, 0.95) * 1e3, 1), "max": round(max(rnd.health) * 1e3, 1),
                       "not_200": dict(rnd.health_bad)},
        "rss_mb_server": {k: round(v[0] / mb) for k, v in rss.items()},
        "rss_mb_tree": {k: round(v[1] / mb) for k, v in rss.items()},
        "wait_over_retry_after": {"n": len(rnd.waits), "max": round(max(rnd.waits), 2) if rnd.waits else None,
                                  "p50": round(_pct(rnd.waits, 0.5), 2) if rnd.waits else None},
    }
    ok = bad_5xx == 0 and rss["after"][0] <= 1.1 * rss["start"][0] and out["healthz_ms"]["p95"] < 50
    out["ok"] = ok
    return out, ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--model", default="asa-base")
    p.add_argument("--settle", type=float, default=SETTLE_S, help="seconds after each round before its RSS")
    p.add_argument("--json", default=None, help="write the report here too")
    args = p.parse_args(argv)
    mix = files()
    noise = _png(1700, 1700, noise=True, seed=72)  # its preview PNG: ~8.7 MB
    port = bench.free_port()
    base = f"http://{bench.HOST}:{port}"
    server_args = argparse.Namespace(device="cpu", workers=1, queue=None, threads=1)
    log_path = os.environ.get("SOAK_LOG", "/tmp/soak_hostile_server.log")
    with open(log_path, "w") as log:
        proc = bench.start_server(server_args, None, args.model, port, log, env=SERVER_ENV)
    reports = []
    ok = True
    try:
        bench.wait_ready(proc, base, 300)
        for _ in range(3):  # warm-up: the work model's first jobs, the decoders' first imports
            httpx.post(f"{base}/v1/upscale", files={"file": ("w.png", _png(64, 64, noise=True))}, timeout=120)
        fork = multiprocessing.get_context("fork")  # before any event loop runs here
        for n in range(1, args.rounds + 1):
            health_stop, (receive, send) = fork.Event(), fork.Pipe(duplex=False)
            poller = fork.Process(target=poll_health, args=(base, health_stop, send), daemon=True)
            poller.start()
            result = asyncio.run(one_round(base, port, proc.pid, args.seconds, args.clients, mix, noise,
                                           seed=72 * n, health_stop=health_stop, settle=args.settle))
            result["rnd"].health, failures = receive.recv()
            result["rnd"].health_bad.update(failures)
            poller.join(10)
            rep, round_ok = report(n, result)
            ok = ok and round_ok
            reports.append(rep)
            print(json.dumps(rep, indent=1), flush=True)
        alive = proc.poll() is None and httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    finally:
        bench.stop_process(proc)
    summary = {"rounds": reports, "server_alive_after": alive, "ok": ok and alive, "server_env": SERVER_ENV,
               "server_log": log_path}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(f"soak: {'ok' if summary['ok'] else 'FAILED'}; server log {log_path}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
