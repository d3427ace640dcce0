"""``sr upscale --ray ADDRESS`` against a Ray head started apart, as an operator starts one.

The head runs ``ray start --head --block`` in a working folder of its own, with token authentication
on (its own token file, so ``~/.ray`` is left alone), one CPU and a 100 MB object store. Each driver
is a separate ``python -m sr`` process started from a sub-folder of the user's folder, so relative
paths, a weights file the workers never saw, the token and a killed actor are met as on a real
cluster. The head is stopped by its process group (only what this module started).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sr.cli import main

pytestmark = [pytest.mark.ray_cluster, pytest.mark.slow]


@dataclass
class Head:
    address: str
    env: dict[str, str]  # a driver's environment that presents the cluster's token
    folder: Path  # the head's working folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("ray", reason="the cluster extra: pip install -e '.[cluster]'")
    folder = tmp_path_factory.mktemp("head")
    token = folder / "auth_token"
    token.write_text(secrets.token_hex(32))
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    # Ray's socket paths must stay short: its own folder under /tmp, not pytest's deep one.
    temp_dir = Path(tempfile.mkdtemp(prefix="srray-", dir="/tmp"))
    port = _free_port()
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.is_file():
        pytest.skip(f"no `ray` command beside {sys.executable} (the cluster extra installs it)")
    proc = subprocess.Popen(
        [str(ray_cli), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
         "--object-store-memory=100000000", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp_dir}"],
        cwd=folder, env={**os.environ, **auth}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: stopped below without touching other Rays
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"ray start --head did not come up (exit {proc.poll()})")
                time.sleep(0.5)
        yield Head(f"127.0.0.1:{port}", {**os.environ, **auth}, folder)
    finally:
        # --block: ray start stops the daemons it started on SIGTERM; what is left after a short
        # grace (its orderly stop took ~30 s here) is killed, by this process group only.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        shutil.rmtree(temp_dir, ignore_errors=True)


def photo(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / max(w - 1, 1), yy * 255 / max(h - 1, 1), (xx + yy) % 64 * 4], axis=2)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


@pytest.fixture
def user(tmp_path: Path, tiny_x2: Path) -> Path:
    """The user's folder: in/ (three images), their own weights file, and sub/ to run from."""
    for i in range(3):
        (tmp_path / "in").mkdir(exist_ok=True)
        Image.fromarray(photo(14, 18, seed=i)).save(tmp_path / "in" / f"img{i}.png")
    shutil.copy(tiny_x2, tmp_path / "mine-x2.safetensors")
    (tmp_path / "sub").mkdir()
    return tmp_path


def drive(
    user: Path, env: dict[str, str], *argv: str, code: str | None = None
) -> subprocess.CompletedProcess:
    """``python -m sr`` (or ``code``, a driver script) from the user's sub-folder."""
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "sr", *argv]
    return subprocess.run(command, cwd=user / "sub", env=env, capture_output=True, text=True, timeout=300)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_relative_paths_and_a_users_weights_file(head: Head, user: Path, capsys) -> None:
    proc = drive(user, head.env, "upscale", "../in", "-o", "../out", "--model", "../mine-x2.safetensors",
                 "--threads", "1", "--ray", head.address)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 done, 0 skipped, 0 failed" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert not (head.folder.parent / "out").exists()  # nothing where the head's folder would put it
    local = user / "local"
    assert main(["upscale", str(user / "in"), "-o", str(local), "--model", str(user / "mine-x2.safetensors"),
                 "--threads", "1"]) == 0
    capsys.readouterr()
    assert files(user / "out") == files(local)  # where asked, byte for byte the local run's


def test_an_image_too_large_for_the_object_store_is_refused_up_front(head: Head, user: Path) -> None:
    # 4000x4000 RGB in, 8000x8000 out: 240 MB of 8-bit samples, the head's store holds 100 MB
    Image.new("RGB", (4000, 4000), (90, 120, 150)).save(user / "in" / "huge.png")
    proc = drive(user, head.env, "upscale", "../in/huge.png", "../in/img0.png", "-o", "../out", "--model",
                 "../mine-x2.safetensors", "--threads", "1", "--ray", head.address)
    assert proc.returncode == 1, proc.stderr[-3000:]
    refused = [line for line in proc.stderr.splitlines() if "huge.png" in line]
    assert len(refused) == 1 and "MiB of Ray's object store" in refused[0] and "without --ray" in refused[0]
    assert "1 done, 0 skipped, 1 failed" in proc.stdout
    assert sorted(p.name for p in (user / "out").iterdir()) == ["img0_x2.png"]


def test_a_killed_actor_is_retried(head: Head, user: Path) -> None:
    marker = user / "crashed-once"  # on the shared filesystem: the retried actor sees it
    code = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from sr.batch import cluster

        class Crashing(cluster.UpscaleActor):  # defined in the driver: shipped to the actor by value
            def __call__(self, row):
                if Path(row["src"]).name == "img1.png" and not os.path.exists({str(marker)!r}):
                    Path({str(marker)!r}).touch()
                    os._exit(1)  # the actor's process dies mid-image, as on an OOM kill
                return super().__call__(row)

        cluster.actor_class = lambda: Crashing
        from sr.cli import main
        sys.exit(main(["upscale", "../in", "-o", "../out", "--model", "../mine-x2.safetensors",
                       "--threads", "1", "--ray", {head.address!r}]))
    """)
    proc = drive(user, head.env, code=code)
    assert marker.exists(), "the fault was never injected"
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 done, 0 skipped, 0 failed" in proc.stdout
    assert sorted(p.name for p in (user / "out").iterdir()) == ["img0_x2.png", "img1_x2.png", "img2_x2.png"]


def test_a_refused_token_is_named_in_one_line(head: Head, user: Path) -> None:
    env = {k: v for k, v in head.env.items() if not k.startswith("RAY_AUTH")}
    env["RAY_AUTH_TOKEN_PATH"] = str(user / "no-token-here")  # never this machine's ~/.ray/auth_token
    proc = drive(user, env, "upscale", "../in", "-o", "../out", "--model", "../mine-x2.safetensors",
                 "--ray", head.address)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"sr upscale: error: Ray at {head.address!r} refused this client's authentication token "
        "(InvalidAuthToken): the cluster has token authentication on; set RAY_AUTH_MODE=token and give "
        "this machine the cluster's token (the head's ~/.ray/auth_token, copied to ~/.ray/auth_token "
        "here, or RAY_AUTH_TOKEN); docs/cluster.md"]
    assert not (user / "out").exists()
