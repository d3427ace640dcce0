"""``sr bench serve``: a bounded load test of the HTTP service on loopback.

Starts its own ``sr serve`` on a free 127.0.0.1 port, sends a fixed number of uploads from a fixed
number of concurrent clients (a deterministic mix of valid images and bad requests), and reports
throughput, p50/p95 latency, the status-code counts, the server's resident memory over the run
(sampled from /proc/PID/status) and whether it is still healthy afterwards. Nothing leaves the machine.

The server runs with its own defaults (queue included) unless ``--queue`` says otherwise. With
``--retry`` the clients behave as a well-mannered client should: on a 503 they wait the
``Retry-After`` seconds and try again, so the report shows the throughput and latency (waits
included) that such a client sees; without it, each 503 is final.

``--soak MINUTES`` runs for that long instead of a number of requests, and adds hostile requests to
the mix (decode bombs, a job predicted to overrun the time limit, a thin strip, a forged JPEG,
an oversized declared body, connections that stall in their headers or body, and the uploads built
to slip past the first checks: :func:`evasive_payloads`); its report gives the 5xx count (503s, the
admission's answers with Retry-After, apart), the RSS of the server and of the server with its
decoder processes at the start, the middle and the end, the longest answer, and the CPU seconds the
server and its decoders spent.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import Any

from sr import DEFAULT_MODEL
from sr.errors import CLIError

# The load test is a client: torch (models, weights) is imported only where tiny test weights are
# made, so a load test against a running service never imports it.

MAX_REQUESTS = 10_000
MAX_CONCURRENCY = 64
MAX_SOAK_MINUTES = 120
# The soak's server: a shorter time limit and header/body timeouts, so that hostile requests are
# answered within seconds and a mis-predicted job shows as a 504 instead of a long stall.
SOAK_SERVER_ENV = {"SR_TIMEOUT_S": "30", "SR_HEADER_TIMEOUT_S": "5", "SR_BODY_TIMEOUT_S": "5"}
HOST = "127.0.0.1"  # loopback only, by design


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model family to serve (default: {DEFAULT_MODEL})")
    p.add_argument("--weights-dir", default=None, help="weights folder (default: the package weights/)")
    p.add_argument("--tiny", action="store_true",
                   help="serve random-init asa-small-x2 weights from a temp folder (no weights needed)")
    p.add_argument("--requests", type=int, default=200, help=f"requests to send (max {MAX_REQUESTS})")
    p.add_argument("--concurrency", type=int, default=8, help=f"clients in flight (max {MAX_CONCURRENCY})")
    p.add_argument("--size", type=int, default=64, help="side of the valid test images (default 64)")
    p.add_argument("--invalid", type=float, default=0.25, help="fraction of bad requests (default 0.25)")
    p.add_argument("--device", default="cpu", help="server device (default cpu)")
    p.add_argument("--workers", type=int, default=1, help="server inference workers (default 1)")
    p.add_argument("--queue", type=int, default=None,
                   help="server queue (default: the server's own, SR_MAX_QUEUE or 4)")
    p.add_argument("--retry", action="store_true",
                   help="clients honour Retry-After: on a 503 they wait and resend (up to --max-retries)")
    p.add_argument("--max-retries", type=int, default=20,
                   help="resends per request with --retry (default 20)")
    p.add_argument("--threads", type=int, default=None, help="server torch threads")
    p.add_argument("--max-seconds", type=float, default=600, help="stop sending after this (default 600)")
    p.add_argument("--soak", type=float, default=None, metavar="MINUTES",
                   help=f"run for MINUTES (max {MAX_SOAK_MINUTES}) with hostile requests in the mix, instead "
                        "of --requests; reports 5xx and RSS at start, middle and end")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


# --- payloads ---------------------------------------------------------------------------------

def image_bytes(size: int, fmt: str, seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    base = np.stack([x, y, (x + y) / 2], axis=-1) * 200 + rng.normal(0, 12, (size, size, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(base, 0, 255).astype(np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


def scan_bomb_jpeg(side: int = 4096, repeats: int = 3000) -> bytes:
    """A side x side grey progressive JPEG whose last scan is repeated ``repeats`` more times before
    EOI: each repeat is a few dozen bytes but a full pass over the image for a decoder."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (side, side), 128).save(buf, format="JPEG", progressive=True, quality=75)
    data = buf.getvalue()
    last_scan = data[data.rindex(b"\xff\xda"):-2]  # up to EOI
    return data[:-2] + last_scan * repeats + b"\xff\xd9"


def iccp_bomb_png(chunks: int = 1200, inflated: int = 16 * 2**20) -> bytes:
    """A 16x16 PNG with ``chunks`` iCCP chunks, each inflating to ``inflated`` bytes."""
    import struct
    import zlib

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (90, 120, 150)).save(buf, format="PNG")
    png = buf.getvalue()
    body = b"bomb\x00\x00" + zlib.compress(bytes(inflated), 9)
    chunk = struct.pack(">I", len(body)) + b"iCCP" + body + struct.pack(">I", zlib.crc32(b"iCCP" + body))
    return png[:33] + chunk * chunks + png[33:]  # after the signature and IHDR


def payloads(size: int) -> dict[str, tuple[str, bytes, dict[str, str], int]]:
    """kind -> (file name, bytes, form fields, expected status)."""
    png, jpg = image_bytes(size, "PNG", 1), image_bytes(size, "JPEG", 2)
    return {
        "png": ("bench.png", png, {"format": "png"}, 200),
        "jpg": ("bench.jpg", jpg, {"format": "same"}, 200),
        "empty": ("empty.png", b"", {}, 400),
        "not-image": ("notes.png", b"this is not an image\n" * 20, {}, 415),
        "truncated": ("cut.png", png[: len(png) // 2], {}, 400),
        "bad-scale": ("bench.png", png, {"scale": "7"}, 422),
        "bad-model": ("bench.png", png, {"model": "no-such-model"}, 422),
    }


def hostile_payloads() -> dict[str, tuple[str, bytes, dict[str, str], int | tuple[int, ...]]]:
    """kind -> (file name, bytes, form fields, expected status or statuses): requests that cost little to send
    and would buy long work or hold a connection without the service's decode-cost, work and time guards."""
    from PIL import Image

    def png(w: int, h: int) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", (w, h), (90, 120, 150)).save(buf, format="PNG")  # a few KB whatever the size
        return buf.getvalue()

    small_jpeg = image_bytes(64, "JPEG", 3)
    sof = small_jpeg.index(b"\xff\xc0")
    forged = small_jpeg[: sof + 5] + (4000).to_bytes(2, "big") * 2 + small_jpeg[sof + 9 :]  # claims 4000x4000
    return {
        "scan-bomb": ("bomb.jpg", scan_bomb_jpeg(4096, 3000), {}, 422),
        "icc-bomb": ("bomb.png", iccp_bomb_png(300), {}, 422),
        # Near the soak's 30-s limit on 1-2 CPU threads: refused (422) when predicted over it, served
        # when not; a 504 (admitted, then over the limit) is the failure, counted as a 5xx.
        "pixel-bomb": ("big.png", png(4096, 4096), {}, (422, 200)),  # 58 KB, 67 MP of output
        "overrun": ("tta.png", png(2048, 2048), {"tta": "true"}, 422),  # at the work limit, ~10 min
        "strip": ("strip.png", png(2_000_000, 1), {}, (422, 200)),   # ~4000 tiles
        "forged-jpeg": ("forged.jpg", forged, {}, 400),
    }


def evasive_payloads() -> dict[str, tuple[str, bytes, dict[str, str], int]]:
    """Uploads that look cheap to the first checks and are not: a scan bomb behind a junk byte (A),
    compressed text chunks that inflate to 36 MiB (B), an orientation tag after the pixels that turns
    the planned size (C), 19 MB of fill, directories or empty RLE escapes before any pixel (E), and
    a small 16-bit RGBA PNG whose preview decodes 128 MiB (G). The letters are the rows of
    docs/service.md's hostile-request table (D there is the soak's stalled uploads, F its full queue).
    kind -> (file name, bytes, form fields, expected status)."""
    import struct
    import zlib

    from PIL import Image

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    def png(w: int, h: int, mode: str = "RGB") -> bytes:
        buf = io.BytesIO()
        Image.new(mode, (w, h), 90).save(buf, format="PNG")
        return buf.getvalue()

    bomb = scan_bomb_jpeg(1024, 20_000)
    app0_end = 4 + int.from_bytes(bomb[4:6], "big")
    small = png(16, 16)
    itxt = chunk(b"iTXt", b"Comment\x00\x01\x00en\x00\x00" + zlib.compress(bytes(12 * 2**20), 9))
    exif = Image.Exif()
    exif[0x0112] = 6
    strip = png(600, 40)
    big = 19 * 2**20
    ifds = big // 6
    tiff = b"II*\x00" + struct.pack("<I", 8) + b"".join(
        struct.pack("<HI", 0, 8 + 6 * (i + 1) if i + 1 < ifds else 0) for i in range(ifds))
    palette = b"".join(bytes((i, i, i, 0)) for i in range(256))
    rows = b"".join(bytes((16, 9 * y)) + b"\x00\x00" for y in range(16))  # one run, then end of line
    rle = b"\x00\x00" * (big // 2) + rows + b"\x00\x01"  # 9.5 M escapes that draw nothing first
    offset = 14 + 40 + len(palette)
    bmp = (b"BM" + struct.pack("<IHHI", offset + len(rle), 0, 0, offset)
           + struct.pack("<IiiHHIIiiII", 40, 16, 16, 1, 8, 1, len(rle), 2835, 2835, 256, 0) + palette + rle)
    return {
        "A-scan-junk": ("a.jpg", bomb[:app0_end] + b"\x00" + bomb[app0_end:], {}, 422),
        "B-itxt": ("b.png", small[:33] + itxt * 3 + small[33:], {}, 422),
        "C-late-exif": ("c.png", strip[:-12] + chunk(b"eXIf", exif.tobytes()[6:]) + strip[-12:],
                        {"width": "2100"}, 422),
        "E-fill-jpeg": ("e.jpg", b"\xff\xd8" + b"\xff" * big + image_bytes(64, "JPEG", 4)[2:], {}, 422),
        "E-tiff-chain": ("e.tif", tiff, {}, 415),
        "E-rle8-bmp": ("e.bmp", bmp, {}, 422),
        "G-preview": ("g.png", rgba16_png(4096), {}, 200),
    }


def rgba16_png(side: int = 4096) -> bytes:
    """A side x side 16-bit RGBA PNG of one colour (~130 KB at 4096, 128 MiB of pixels decoded), written
    directly: an IHDR and one IDAT of unfiltered rows."""
    import struct
    import zlib

    import numpy as np

    row = b"\x00" + np.tile(np.array([5000, 20000, 40000, 65535], ">u2"), side).tobytes()

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 16, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * side, 9)) + chunk(b"IEND", b""))


# Kinds posted to /v1/preview instead of /v1/upscale.
PREVIEW_KINDS = frozenset({"G-preview"})


# Requests sent on a raw socket: (bytes to send, then wait for the answer), expected status.
_MULTIPART_HEAD = ("POST /v1/upscale HTTP/1.1\r\nHost: bench\r\nContent-Type: multipart/form-data; "
                   "boundary=b\r\nContent-Length: {length}\r\n\r\n")
RAW_REQUESTS: dict[str, tuple[bytes, int]] = {
    "head-stall": (b"POST /v1/upscale HTTP/1.1\r\nHost: bench\r\nContent-Ty", 408),
    "body-stall": (_MULTIPART_HEAD.format(length=50_000).encode() + b"--b\r\nContent-Disposition: form-data; "
                   b'name="file"; filename="a.png"\r\n\r\n\x89PNG', 408),
    "oversized": (_MULTIPART_HEAD.format(length=10**10).encode(), 413),
}


EVASIVE_KINDS = ("A-scan-junk", "B-itxt", "C-late-exif", "E-fill-jpeg", "E-tiff-chain", "E-rle8-bmp",
                 "G-preview")
HOSTILE_KINDS = ("scan-bomb", "icc-bomb", "pixel-bomb", "overrun", "strip", "forged-jpeg", *RAW_REQUESTS,
                 *EVASIVE_KINDS)


def soak_kinds() -> list[str]:
    """One cycle of the soak's mix: 4 valid or bad requests (20 % bad) per hostile kind, with one
    hostile request after every fourth (16 kinds: 64 + 16 requests)."""
    out: list[str] = []
    for i, kind in enumerate(schedule(4 * len(HOSTILE_KINDS), 0.2)):
        out.append(kind)
        if i % 4 == 3:
            out.append(HOSTILE_KINDS[i // 4])
    return out


def schedule(n: int, invalid: float) -> list[str]:
    """A deterministic interleaving: every 1/invalid-th request is bad, cycling through the bad kinds."""
    valid, bad = ["png", "jpg"], ["empty", "not-image", "truncated", "bad-scale", "bad-model"]
    kinds, owed, v, b = [], 0.0, 0, 0
    for _ in range(n):
        owed += invalid
        if owed >= 1.0:
            owed -= 1.0
            kinds.append(bad[b % len(bad)])
            b += 1
        else:
            kinds.append(valid[v % len(valid)])
            v += 1
    return kinds


# --- server -----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (the server's decoder sandbox), from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def tree_rss_bytes(pid: int) -> int | None:
    """RSS of ``pid`` plus its live children's."""
    own = rss_bytes(pid)
    if own is None:
        return None
    return own + sum(rss_bytes(c) or 0 for c in _children(pid))


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of ``pid``, of its children it has reaped, and of its live children."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(p: int) -> list[str] | None:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            return None
        return stat[stat.rindex(")") + 2:].split()

    own = fields(pid)
    if own is None:
        return None
    total = sum(int(x) for x in own[11:15])  # utime, stime, cutime, cstime
    for child in _children(pid):
        f = fields(child)
        total += sum(int(x) for x in f[11:13]) if f else 0
    return total / tick


class RssSampler(threading.Thread):
    def __init__(self, pid: int, every: float = 0.1, tree: bool = False) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.samples = pid, every, []
        self.times: list[float] = []  # monotonic time of each sample
        self.tree = tree              # also sample the server with its decoder processes
        self.tree_samples: list[int] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            rss = rss_bytes(self.pid)
            if rss is not None:
                self.samples.append(rss)
                self.times.append(time.monotonic())
                if self.tree:
                    self.tree_samples.append(tree_rss_bytes(self.pid) or rss)
            self._halt.wait(self.every)

    def stop(self) -> list[int]:
        self._halt.set()
        self.join()
        return self.samples


def start_server(args: argparse.Namespace, weights_dir: str | None, model: str, port: int,
                 log: io.TextIOBase, env: dict[str, str] | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "sr", "serve", "--host", HOST, "--port", str(port), "--model", model,
           "--device", args.device, "--workers", str(args.workers), "--log-level", "warning"]
    if args.queue is not None:
        cmd += ["--queue", str(args.queue)]
    if weights_dir:
        cmd += ["--weights-dir", weights_dir]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})


def wait_ready(proc: subprocess.Popen, base: str, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CLIError(f"the server exited with code {proc.returncode} before it was ready")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise CLIError(f"the server was not ready after {timeout:.0f} s")


# --- load -------------------------------------------------------------------------------------

async def run_load(base: str, kinds: Iterable[str], bodies: dict, concurrency: int, max_seconds: float,
                   retry: bool = False, max_retries: int = 20,
                   raw: dict[str, tuple[bytes, int]] | None = None) -> list[tuple]:
    """[(kind, final status, seconds from first send to final answer, resends, seconds waited)].

    ``kinds`` may be endless (the soak): the clients stop at ``max_seconds``. ``raw`` kinds are sent
    as bytes on a socket of their own (requests httpx would not send: stalled or oversized)."""
    import httpx

    results: list[tuple[str, int | str, float, int, float]] = []
    pending = iter(kinds)
    deadline = time.monotonic() + max_seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(base_url=base, timeout=max(60.0, max_seconds), limits=limits) as client:
        async def worker() -> None:
            while time.monotonic() < deadline and (kind := next(pending, None)) is not None:
                t0 = time.perf_counter()
                if raw is not None and kind in raw:
                    status = await _send_raw(base, raw[kind][0])
                    results.append((kind, status, time.perf_counter() - t0, 0, 0.0))
                    continue
                name, data, fields, _ = bodies[kind]
                resends, waited = 0, 0.0
                path = "/v1/preview" if kind in PREVIEW_KINDS else "/v1/upscale"
                while True:
                    try:
                        r = await client.post(path, files={"file": (name, data)}, data=fields)
                        status: int | str = r.status_code
                    except httpx.HTTPError as e:
                        status = f"error:{type(e).__name__}"
                        break
                    pause = retry_delay(r.headers.get("retry-after")) if status == 503 else None
                    if not retry or pause is None or resends >= max_retries \
                            or time.monotonic() + pause > deadline:
                        break
                    await asyncio.sleep(pause)
                    resends, waited = resends + 1, waited + pause
                results.append((kind, status, time.perf_counter() - t0, resends, waited))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


async def _send_raw(base: str, payload: bytes, timeout: float = 120) -> int | str:
    """Send ``payload`` on a new connection, then wait (without sending more) for the status line."""
    host, port = base.removeprefix("http://").split(":")
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
    except OSError as e:
        return f"error:{type(e).__name__}"
    try:
        writer.write(payload)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        return f"error:{type(e).__name__}"
    finally:
        writer.close()
        with suppress(OSError):
            await writer.wait_closed()
    parts = line.split()
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return "error:no-status-line"


def retry_delay(header: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds form), or None when absent/unusable."""
    try:
        value = float(header) if header is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value <= 3600 else None


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _statuses(expected: int | tuple[int, ...]) -> tuple[int, ...]:
    return expected if isinstance(expected, tuple) else (expected,)


def summarize(results: list[tuple], elapsed: float, expected: dict[str, int | tuple[int, ...]],
              rss: list[int], rss_base: int | None, healthy: bool) -> dict[str, Any]:
    lat_all = [r[2] * 1e3 for r in results]
    lat_ok = [r[2] * 1e3 for r in results if r[1] == 200]
    counts = Counter(str(r[1]) for r in results)
    unexpected = Counter(f"{r[0]}:{r[1]}" for r in results
                         if r[1] not in _statuses(expected[r[0]]) and r[1] != 503)
    ok = sum(1 for r in results if r[1] == 200)
    end = rss[-1] if rss else None
    growth = (end - rss_base) if (end is not None and rss_base is not None) else None
    flat = growth is not None and growth <= max(32 * 2**20, 0.10 * rss_base)
    return {
        "requests": len(results),
        "seconds": round(elapsed, 3),
        "throughput_rps": round(len(results) / elapsed, 2) if elapsed > 0 else None,
        "ok_throughput_rps": round(ok / elapsed, 2) if elapsed > 0 else None,  # 200s per second
        "resends": sum(r[3] for r in results),
        "retry_wait_s": round(sum(r[4] for r in results), 1),
        "latency_ms": {"p50": _round(_pct(lat_all, 50)), "p95": _round(_pct(lat_all, 95)),
                       "p50_ok": _round(_pct(lat_ok, 50)), "p95_ok": _round(_pct(lat_ok, 95))},
        "status_counts": dict(sorted(counts.items())),
        "unexpected": dict(unexpected),
        "rss_mb": {"after_warmup": _mb(rss_base), "end": _mb(end), "max": _mb(max(rss) if rss else None),
                   "growth": _mb(growth), "flat": flat},
        "healthy_after": healthy,
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def _mb(x: int | float | None) -> float | None:
    return None if x is None else round(x / 2**20, 1)


def _make_tiny_weights(folder: Path) -> None:
    import torch

    from sr.models import build_model
    from sr.weights import save_weights

    torch.manual_seed(0)
    save_weights(build_model("asa-small-x2"), folder / "asa-small-x2.safetensors", preset="asa-small")


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.requests <= MAX_REQUESTS:
        raise CLIError(f"--requests must be 1..{MAX_REQUESTS}")
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise CLIError(f"--concurrency must be 1..{MAX_CONCURRENCY}")
    if not 0 <= args.invalid <= 1:
        raise CLIError("--invalid must be between 0 and 1")
    if not 8 <= args.size <= 2048:
        raise CLIError("--size must be 8..2048")
    if not 0 < args.max_seconds <= 3600:
        raise CLIError("--max-seconds must be in (0, 3600]")
    if not 0 <= args.max_retries <= 1000:
        raise CLIError("--max-retries must be 0..1000")
    soak = args.soak is not None
    if soak and not 0 < args.soak <= MAX_SOAK_MINUTES:
        raise CLIError(f"--soak must be in (0, {MAX_SOAK_MINUTES}] minutes")
    import httpx

    with tempfile.TemporaryDirectory(prefix="sr-bench-serve-") as tmp:
        weights_dir, model = args.weights_dir, args.model
        if args.tiny:
            _make_tiny_weights(Path(tmp))
            weights_dir, model = tmp, "asa-small"
        port = free_port()
        base = f"http://{HOST}:{port}"
        log_path = Path(tmp) / "server.log"
        with open(log_path, "w") as log:
            proc = start_server(args, weights_dir, model, port, log, env=SOAK_SERVER_ENV if soak else None)
        try:
            try:
                wait_ready(proc, base, timeout=180)
            except CLIError as e:
                tail = log_path.read_text()[-2000:]
                raise CLIError(f"{e}\n--- server log ---\n{tail}") from None
            bodies = payloads(args.size)
            raw = None
            if soak:
                bodies.update(hostile_payloads())
                bodies.update(evasive_payloads())
                raw = RAW_REQUESTS
            expected = {**{k: v[3] for k, v in bodies.items()}, **{k: v[1] for k, v in (raw or {}).items()}}
            # Warm-up: one round of valid requests at full concurrency (the soak: one cycle of its
            # mix per client), so the baseline RSS includes every worker's and connection's buffers
            # (multi-MB uploads leave ~50 MB in the allocator's per-thread arenas, then no more);
            # growth after that would be a leak.
            warm = soak_kinds() * args.concurrency if soak else ["png", "jpg"] * args.concurrency
            asyncio.run(run_load(base, warm, bodies, args.concurrency, 180, retry=True, raw=raw))
            rss_base = rss_bytes(proc.pid)
            tree_base, cpu_base = tree_rss_bytes(proc.pid), tree_cpu_seconds(proc.pid)
            sampler = RssSampler(proc.pid, every=1.0 if soak else 0.1, tree=soak)
            sampler.start()
            kinds: Iterable[str] = (itertools.cycle(soak_kinds()) if soak
                                    else schedule(args.requests, args.invalid))
            seconds = args.soak * 60 if soak else args.max_seconds
            t0 = time.perf_counter()
            results = asyncio.run(run_load(base, kinds, bodies, args.concurrency, seconds,
                                           retry=args.retry, max_retries=args.max_retries, raw=raw))
            elapsed = time.perf_counter() - t0
            rss = sampler.stop()
            cpu_end = tree_cpu_seconds(proc.pid)
            health: dict[str, Any] = {}
            try:
                health = httpx.get(f"{base}/healthz", timeout=5).json()
                queue = health["jobs"]["max_queue"]
            except (httpx.HTTPError, ValueError, KeyError):
                queue = args.queue
            try:
                healthy = (proc.poll() is None and httpx.get(f"{base}/healthz", timeout=5).status_code == 200
                           and httpx.get(f"{base}/readyz", timeout=5).status_code == 200)
            except httpx.HTTPError:
                healthy = False
        finally:
            stop_process(proc)
    report = summarize(results, elapsed, expected, rss, rss_base, healthy)
    report.update(model=model if not args.tiny else "asa-small-x2 (random init)", device=args.device,
                  concurrency=args.concurrency, workers=args.workers, queue=queue, retry=args.retry,
                  image=f"{args.size}x{args.size}",
                  invalid_fraction=args.invalid, cpu_count=os.cpu_count())
    if soak:
        report["soak"] = soak_summary(results, sampler, rss_base, args.soak, tree_base)
        report["soak"]["server_env"] = SOAK_SERVER_ENV
        report["soak"]["cpu_s"] = (round(cpu_end - cpu_base, 1)
                                   if cpu_end is not None and cpu_base is not None else None)
        report["soak"]["server_at_end"] = {k: health.get(k) for k in ("jobs", "uploads", "sandbox")}
        report["invalid_fraction"] = 0.2  # soak_kinds' own mix
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    if soak:
        ok = (healthy and not report["unexpected"] and report["soak"]["5xx_not_503"] == 0
              and report["soak"]["rss_flat_within_10pct"])
    else:
        ok = healthy and not report["unexpected"] and report["requests"] == args.requests
    return 0 if ok else 1


def soak_summary(results: list[tuple], sampler: RssSampler, rss_start: int | None,
                 minutes: float, tree_start: int | None = None) -> dict[str, Any]:
    """5xx (and those not 503, the admission's answer) and connection errors, statuses per kind,
    the longest answer, and the RSS (the server's; with ``tree_start``, also the server's with its
    decoder processes) at the start, the middle and the end."""
    def points(samples: list[int], start: int | None) -> dict[str, float | None]:
        times = sampler.times[: len(samples)]
        middle = None
        if times:
            half = (times[0] + times[-1]) / 2
            middle = samples[min(range(len(times)), key=lambda i: abs(times[i] - half))]
        return {"start": _mb(start), "middle": _mb(middle), "end": _mb(samples[-1] if samples else None),
                "max": _mb(max(samples) if samples else None)}

    rss = points(sampler.samples, rss_start)
    worst = max((abs(x - rss["start"]) for x in (rss["middle"], rss["end"]) if x is not None), default=None) \
        if rss_start else None
    by_kind: dict[str, Counter] = {}
    for r in results:
        by_kind.setdefault(r[0], Counter())[str(r[1])] += 1
    five = [r for r in results if isinstance(r[1], int) and r[1] >= 500]
    out = {
        "minutes": minutes,
        "5xx": len(five),
        "5xx_not_503": sum(1 for r in five if r[1] != 503),
        "connection_errors": sum(1 for r in results if isinstance(r[1], str)),
        "longest_answer_s": round(max((r[2] for r in results), default=0.0), 2),
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "rss_mb": rss,
        "rss_flat_within_10pct": worst is not None and worst <= 0.10 * rss["start"],
    }
    if tree_start is not None and sampler.tree_samples:
        out["tree_rss_mb"] = points(sampler.tree_samples, tree_start)
    return out


def _print_table(r: dict[str, Any]) -> None:
    lat, rss = r["latency_ms"], r["rss_mb"]
    print(f"model {r['model']} on {r['device']}, {r['workers']} worker(s), queue {r['queue']}, "
          f"{r['concurrency']} concurrent clients{' honouring Retry-After' if r['retry'] else ''}, "
          f"{r['image']} images, {r['invalid_fraction']:.0%} bad requests")
    print(f"requests      {r['requests']} in {r['seconds']:.1f} s = {r['throughput_rps']} req/s "
          f"({r['ok_throughput_rps']} 200s/s)")
    if r["retry"]:
        print(f"resends       {r['resends']} after 503, {r['retry_wait_s']} s waited in all")
    print(f"latency ms    p50 {lat['p50']}  p95 {lat['p95']}   "
          f"(200s only: p50 {lat['p50_ok']}  p95 {lat['p95_ok']})")
    print("status        " + "  ".join(f"{k}: {v}" for k, v in r["status_counts"].items()))
    if r["unexpected"]:
        print("UNEXPECTED    " + "  ".join(f"{k}: {v}" for k, v in r["unexpected"].items()))
    print(f"server RSS MB after warm-up {rss['after_warmup']}, end {rss['end']}, max {rss['max']}, "
          f"growth {rss['growth']} ({'flat' if rss['flat'] else 'NOT flat'})")
    if "soak" in r:
        soak, mb = r["soak"], r["soak"]["rss_mb"]
        print(f"soak          {soak['minutes']:g} min: {soak['5xx']} 5xx ({soak['5xx_not_503']} not 503), "
              f"{soak['connection_errors']} connection errors, longest answer {soak['longest_answer_s']} s, "
              f"{soak.get('cpu_s')} CPU s (server and decoders); "
              f"server {', '.join(f'{k}={v}' for k, v in soak['server_env'].items())}")
        for kind, counts in soak["by_kind"].items():
            print(f"  {kind:<14}" + "  ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
        print(f"server RSS MB start {mb['start']}, middle {mb['middle']}, end {mb['end']}, max {mb['max']} "
              f"({'flat within 10%' if soak['rss_flat_within_10pct'] else 'NOT flat within 10%'})")
        if "tree_rss_mb" in soak:
            tree = soak["tree_rss_mb"]
            print(f"with decoders start {tree['start']}, middle {tree['middle']}, end {tree['end']}, "
                  f"max {tree['max']}")
    print(f"healthy after {'yes' if r['healthy_after'] else 'NO'}")
