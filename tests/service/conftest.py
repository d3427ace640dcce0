"""Fixtures for the service tests: tiny random weights, in-process clients, one live `sr serve`."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient
from PIL import Image

from benchmarks.serve import free_port, stop_process
from sr.models import build_model
from sr.service.app import create_app
from sr.service.limits import connection_protocol
from sr.service.settings import Settings
from sr.weights import save_weights

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def weights_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """asa-small x2 and x3 (random init): real files, real loading, no x4 (for the 422 case)."""
    folder = tmp_path_factory.mktemp("weights")
    for scale in (2, 3):
        torch.manual_seed(scale)
        save_weights(build_model(f"asa-small-x{scale}"), folder / f"asa-small-x{scale}.safetensors",
                     preset="asa-small", validation='{"Set5": {"psnr": 30.5, "ssim": 0.9}}')
    return folder


def image_bytes(w: int = 24, h: int = 20, mode: str = "RGB", fmt: str = "PNG", seed: int = 0,
                **save: object) -> bytes:
    rng = np.random.default_rng(seed)
    if mode == "I;16":
        arr = rng.integers(0, 65536, (h, w), dtype=np.uint16)
        img = Image.fromarray(arr)  # uint16 -> mode I;16
    else:
        bands = len(Image.new(mode, (1, 1)).getbands())
        arr = rng.integers(0, 256, (h, w, bands), dtype=np.uint8)
        img = Image.fromarray(arr[..., 0] if bands == 1 else arr, mode)
    buf = io.BytesIO()
    img.save(buf, format=fmt, **save)
    return buf.getvalue()


@pytest.fixture
def make_image() -> Callable[..., bytes]:
    """make_image(w, h, mode, fmt, seed, **save_options) -> encoded image bytes."""
    return image_bytes


class JobGate:
    """Stands in for sr.service.running.run_job: each job signals it started, then waits for release (a slow
    model); ``request_changes`` are applied to the job's UpscaleRequest before it really runs (e.g.
    tta=False: admitted as a tta job, run as a plain one)."""

    def __init__(self, real: Callable, **request_changes: object) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.real, self.request_changes = real, request_changes

    def __call__(self, engine, job, *rest):
        self.started.set()
        self.release.wait(20)
        if self.request_changes:
            job = dataclasses.replace(job, request=dataclasses.replace(job.request, **self.request_changes))
        return self.real(engine, job, *rest)


@pytest.fixture
def gate_jobs(monkeypatch: pytest.MonkeyPatch) -> Callable[..., JobGate]:
    """gate_jobs(**request_changes) puts a JobGate in place of sr.service.running.run_job, and returns it."""
    import sr.service.running as service_running

    def install(**request_changes: object) -> JobGate:
        gate = JobGate(service_running.run_job, **request_changes)
        monkeypatch.setattr(service_running, "run_job", gate)
        return gate

    return install


@pytest.fixture
def make_client(weights_dir: Path) -> Iterator[Callable[..., TestClient]]:
    """make_client(**settings) -> a TestClient whose app has loaded its model (lifespan run)."""
    opened: list[TestClient] = []

    def make(wait: bool = True, **overrides: object) -> TestClient:
        values = {"model": "asa-small", "weights_dir": weights_dir, "device": "cpu", "threads": 1,
                  **overrides}
        client = TestClient(create_app(Settings(**values)))  # type: ignore[arg-type]
        client.__enter__()
        opened.append(client)
        if wait:
            assert client.app.state.service.hub.loaded_event.wait(60), "model did not load in 60 s"
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def make_server(weights_dir: Path) -> Iterator[Callable[..., str]]:
    """make_server(**settings) -> base URL of the app under a real uvicorn in this process (a thread),
    model loaded: for what needs real sockets (disconnects, connection close, stalled uploads)."""
    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def make(**overrides: object) -> str:
        values = {"model": "asa-small", "weights_dir": weights_dir, "device": "cpu", "threads": 1,
                  **overrides}
        settings = Settings(**values)  # type: ignore[arg-type]
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="on",
                                               http=connection_protocol(settings)))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        running.append((server, thread))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    return base
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and thread.is_alive(), "in-process server did not start"
            time.sleep(0.05)

    yield make
    for server, thread in running:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="session")
def live_server(weights_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `sr serve` process on a free loopback port; yields its base URL, stops it after."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("serve") / "server.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SR_MAX_UPLOAD_BYTES": str(2 * 2**20)}
    cmd = [sys.executable, "-m", "sr", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--weights-dir", str(weights_dir), "--model", "asa-small", "--device", "cpu", "--threads", "1",
           "--log-level", "warning"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                                env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"sr serve exited with {proc.returncode}:\n{log_path.read_text()}")
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"sr serve not ready after 120 s:\n{log_path.read_text()}")
            time.sleep(0.2)
        yield base
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def photo_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """asa-base-x2 and photo-x2: one architecture (asa-small, random), other weights; no x3."""
    import torch

    from sr.models import build_model
    from sr.weights import save_weights

    folder = tmp_path_factory.mktemp("photo-weights")
    for name, seed in (("asa-base", 0), ("photo", 1)):
        torch.manual_seed(seed)
        save_weights(build_model("asa-small-x2"), folder / f"{name}-x2.safetensors", preset="asa-small")
    return folder


@pytest.fixture(scope="session")
def natural_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """asa-base and photo at x2 and x3, photo-natural at x2 only: one architecture (asa-small, random),
    other weights (the look's blend; its x3 is missing, as in the shipped weights for now)."""
    import torch

    from sr.models import build_model
    from sr.weights import save_weights

    folder = tmp_path_factory.mktemp("natural-weights")
    for name, scale, seed in (("asa-base", 2, 0), ("asa-base", 3, 1), ("photo", 2, 2), ("photo", 3, 3),
                              ("photo-natural", 2, 4)):
        torch.manual_seed(seed)
        save_weights(build_model(f"asa-small-x{scale}"), folder / f"{name}-x{scale}.safetensors",
                     preset="asa-small")
    return folder
