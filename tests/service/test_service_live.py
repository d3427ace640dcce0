"""A real `sr serve` process on loopback: upload over HTTP, CLI errors, and `sr bench serve`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from PIL import Image

from sr.commands import serve as serve_cmd
from sr.service.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_end_to_end_upload_over_http(live_server: str, make_image) -> None:
    with httpx.Client(base_url=live_server, timeout=60) as client:
        assert client.get("/healthz").json()["status"] == "ok"
        r = client.post("/v1/upscale", files={"file": ("shot.jpg", make_image(30, 20, fmt="JPEG"))},
                        data={"scale": "3", "format": "webp"})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "image/webp"
        assert r.headers["content-disposition"] == 'attachment; filename="shot_x3.webp"'
        assert Image.open(io.BytesIO(r.content)).size == (90, 60)
        # Bad input over a real socket: a clean 4xx, and the server is still there.
        r = client.post("/v1/upscale", files={"file": ("x.png", b"garbage" * 10)})
        assert r.status_code == 415
        big = os.urandom(3 * 2**20)  # the live server's limit is 2 MiB (SR_MAX_UPLOAD_BYTES)
        r = client.post("/v1/upscale", files={"file": ("big.png", big)})
        assert r.status_code == 413
        assert client.get("/readyz").status_code == 200


def _sr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sr", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def test_serve_cli_errors_are_messages_not_tracebacks(weights_dir: Path, tmp_path: Path) -> None:
    cases = [
        (["serve", "--weights-dir", str(weights_dir), "--model", "nope"], {},
         "model 'nope' not found (available: asa-small"),
        (["serve", "--weights-dir", str(tmp_path / "missing")], {}, "weights folder not found"),
        (["serve", "--weights-dir", str(weights_dir), "--model", "asa-small", "--port", "70000"], {},
         "--port must be 0..65535"),
        (["serve", "--weights-dir", str(weights_dir), "--model", "asa-small", "--device", "tpu"], {},
         "unknown device 'tpu'"),
        (["serve"], {"SR_WORKERS": "lots"}, "SR_WORKERS='lots'"),
        (["serve", "--workers", "0"], {}, "workers must be >= 1"),
        (["serve"], {"SR_API_KEY": "clé"}, "API key must be printable ASCII"),
        (["serve"], {"SR_API_KEY": "   "}, "SR_API_KEY='   ': API key must not be empty or blank"),
        (["serve", "--api-key", " padded "], {}, "API key must not start or end with a space"),
    ]
    for argv, env, message in cases:
        done = _sr(*argv, env=env)
        assert done.returncode == 2, (argv, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_flags_override_environment(monkeypatch) -> None:
    monkeypatch.setenv("SR_WORKERS", "3")
    monkeypatch.setenv("SR_MAX_QUEUE", "9")
    monkeypatch.setenv("SR_API_KEY", "from-env")
    import argparse

    p = argparse.ArgumentParser()
    serve_cmd.add_arguments(p)
    s = serve_cmd.build_settings(p.parse_args(["--workers", "2", "--max-upload-mb", "1.5", "--tile", "off"]))
    assert isinstance(s, Settings) and s.precision == "auto"
    monkeypatch.setenv("SR_PRECISION", "fp32")
    assert serve_cmd.build_settings(p.parse_args(["--precision", "bf16"])).precision == "bf16"
    assert serve_cmd.build_settings(p.parse_args([])).precision == "fp32"
    assert (s.workers, s.max_queue, s.api_key) == (2, 9, "from-env")
    assert (s.max_upload_bytes, s.tile) == (int(1.5 * 2**20), 0)


def test_bench_serve_reports_a_bounded_loopback_run(tmp_path: Path) -> None:
    done = _sr("bench", "serve", "--tiny", "--requests", "24", "--concurrency", "3", "--size", "32",
               "--threads", "1", "--json", env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["requests"] == 24 and report["healthy_after"] is True
    assert report["queue"] == 4 and report["retry"] is False  # the server's own default queue
    counts = report["status_counts"]
    assert sum(counts.values()) == 24
    assert counts["200"] == 18 and counts["400"] + counts["415"] + counts["422"] == 6  # 25 % bad
    assert report["unexpected"] == {}
    assert report["throughput_rps"] > 0
    assert 0 < report["latency_ms"]["p50"] <= report["latency_ms"]["p95"]
    assert report["rss_mb"]["after_warmup"] > 50 and report["rss_mb"]["flat"] is True
