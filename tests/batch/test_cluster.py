"""``sr upscale --ray``: the Ray Data executor against the local one, on one local Ray (2 CPUs).

Faults are injected from here, not through product code: ``cluster.actor_class`` is patched to a
subclass of the real actor defined inside the test (so cloudpickle ships it to the workers by value)
that exits its process on a chosen file; the interrupted driver is a child process that SIGKILLs
itself after its first outputs are recorded.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sr.batch import BatchError
from sr.cli import main
from sr.io import read_image

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (2 CPUs: CI's machine); the command joins it instead of starting
    its own, and leaves it running."""
    ray = pytest.importorskip("ray", reason="the cluster extra: pip install -e '.[cluster]'")
    started = not ray.is_initialized()
    if started:
        # workers at nice 0 as the command's own local Ray has them (Ray's default 15 starves them
        # on a busy machine)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _system_config={"worker_niceness": 0})
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / max(w - 1, 1), yy * 255 / max(h - 1, 1), (xx + yy) % 64 * 4], axis=2)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def save(path: Path, array: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)
    return path


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def failures(err: str) -> list[str]:
    return sorted(line for line in err.splitlines() if line.startswith("sr upscale: "))


def upscale(src: Path, out: Path, model: Path, *extra: str) -> int:
    return main(["upscale", str(src), "-o", str(out), "--model", str(model), "--threads", "1", *extra])


def mixed_tree(src: Path) -> None:
    """Good and bad files in a tree: rgb, gray, alpha, 16-bit; corrupt, not an image, too large."""
    save(src / "rgb.png", photo(20, 30))
    save(src / "sub" / "gray.png", photo(16, 18, seed=1)[:, :, 0])
    ramp = np.linspace(0, 255, 14 * 12).reshape(14, 12).astype(np.uint8)
    save(src / "sub" / "alpha.png", np.dstack([photo(14, 12, seed=2), ramp]))
    save(src / "sub" / "deep" / "wide.png", (np.arange(99).reshape(9, 11) * 600).astype(np.uint16))
    (src / "sub" / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 20)
    (src / "notes.png").write_text("not an image at all\n")
    save(src / "big.png", photo(40, 40, seed=3))  # 1600 px: over --max-pixels 1500


@pytest.mark.slow
def test_ray_outputs_equal_the_local_run_byte_for_byte(tmp_path, tiny_x2, local_ray, capsys):
    src = tmp_path / "in"
    mixed_tree(src)
    flags = ("-r", "--max-pixels", "1500", "--save-budget-map")
    assert upscale(src, tmp_path / "local", tiny_x2, *flags) == 1
    local = capsys.readouterr()
    assert upscale(src, tmp_path / "ray", tiny_x2, *flags, "--ray") == 1
    remote = capsys.readouterr()
    want = files(tmp_path / "local")
    assert sorted(want) == ["rgb_x2.png", "rgb_x2_budget.png", "sub/alpha_x2.png", "sub/alpha_x2_budget.png",
                            "sub/deep/wide_x2.png", "sub/deep/wide_x2_budget.png", "sub/gray_x2.png",
                            "sub/gray_x2_budget.png"]
    assert files(tmp_path / "ray") == want  # same names, same bytes
    assert failures(remote.err) == failures(local.err) and len(failures(local.err)) == 3
    assert "4 done, 0 skipped, 3 failed" in local.out and "4 done, 0 skipped, 3 failed" in remote.out
    assert read_image(tmp_path / "ray" / "sub" / "deep" / "wide_x2.png").bit_depth == 16


@pytest.mark.slow
def test_a_worker_killed_mid_run_is_retried(tmp_path, tiny_x2, local_ray, monkeypatch, capsys):
    """img2 kills its actor on the first attempt (retried: written); img3 on every attempt (reported
    as failed after cluster.MAX_ATTEMPTS, the batch goes on)."""
    from sr.batch import cluster

    for i in range(5):
        save(tmp_path / "in" / f"img{i}.png", photo(12, 14, seed=i))
    marker = tmp_path / "crashed-once"

    class Crashing(cluster.UpscaleActor):  # local class: cloudpickle ships it by value
        def __call__(self, row):
            name = Path(row["src"]).name
            if name == "img3.png" or (name == "img2.png" and not marker.exists()):
                marker.touch()
                os._exit(1)  # the actor's process dies mid-task, as on an OOM kill or a lost node
            return super().__call__(row)

    monkeypatch.setattr(cluster, "actor_class", lambda: Crashing)
    assert upscale(tmp_path / "in", tmp_path / "out", tiny_x2, "--ray") == 1
    assert marker.exists(), "the fault was never injected"
    captured = capsys.readouterr()
    assert "4 done, 0 skipped, 1 failed" in captured.out
    died = cluster.WORKER_DIED.format(n=cluster.MAX_ATTEMPTS)
    assert failures(captured.err) == [f"sr upscale: {tmp_path / 'in' / 'img3.png'}: {died}"]
    assert "Traceback" not in captured.err
    out = tmp_path / "out"
    want = [f"img{i}_x2.png" for i in (0, 1, 2, 4)]
    assert sorted(p.name for p in out.iterdir()) == want  # no temp files, nothing for img3
    (tmp_path / "in" / "img3.png").unlink()
    assert upscale(tmp_path / "in", tmp_path / "local", tiny_x2) == 0
    assert files(out) == files(tmp_path / "local")


@pytest.mark.slow
def test_skip_existing_after_the_driver_is_killed_writes_only_the_missing(tmp_path, tiny_x2, local_ray,
                                                                          capsys):
    count = 12
    for i in range(count):
        save(tmp_path / "in" / f"img{i:02d}.png", photo(24, 24, seed=i))
    out = tmp_path / "out"
    # A driver joining the test's Ray that SIGKILLs itself once it has recorded two written files.
    driver = textwrap.dedent(f"""
        import os, signal, sys
        from sr.batch import report
        record = report.Stats.record
        def record_then_die(self, job, written):
            record(self, job, written)
            if self.done >= 2:
                os.kill(os.getpid(), signal.SIGKILL)
        report.Stats.record = record_then_die
        from sr.cli import main
        sys.exit(main(["upscale", {str(tmp_path / "in")!r}, "-o", {str(out)!r}, "--model",
                       {str(tiny_x2)!r}, "--threads", "1", "--ray", {local_ray!r}]))
    """)
    proc = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    time.sleep(2)  # the killed job's workers are stopped by Ray
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*_x2.png")}
    assert 2 <= len(before) < count, "the driver was not killed mid-run"
    for name in before:  # what the killed run left is complete (temp names are hidden, never outputs)
        assert read_image(out / name).pixels.shape == (48, 48, 3)
    assert upscale(tmp_path / "in", out, tiny_x2, "--ray", "--skip-existing") == 0
    summary = capsys.readouterr().out
    assert f"{count - len(before)} done, {len(before)} skipped, 0 failed" in summary
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*_x2.png") if p.name in before} == before
    assert sorted(p.name for p in out.glob("*_x2.png")) == [f"img{i:02d}_x2.png" for i in range(count)]


@pytest.mark.slow
def test_ray_runs_an_outside_model_and_its_pre_model_as_the_local_run(tmp_path, local_ray, capsys):
    """Actors get both model files (spandrel's architectures, not sr's) and write the local bytes."""
    from tests.external.models import save_model, tiny_models

    tiny = tiny_models()  # skips, saying why, without spandrel (the models extra)
    model = save_model(tiny["compact-x2"], tmp_path / "models").safetensors
    pre = save_model(tiny["compact-1x"], tmp_path / "models").pth
    for i in range(3):
        save(tmp_path / "in" / f"img{i}.png", photo(12, 14, seed=i))
    flags = ("--pre", str(pre), "--precision", "fp32")
    assert upscale(tmp_path / "in", tmp_path / "local", model, *flags) == 0
    assert upscale(tmp_path / "in", tmp_path / "ray", model, *flags, "--ray") == 0
    assert "3 done, 0 skipped, 0 failed" in capsys.readouterr().out
    want = files(tmp_path / "local")
    assert sorted(want) == ["img0_x2.png", "img1_x2.png", "img2_x2.png"]
    assert files(tmp_path / "ray") == want
    assert upscale(tmp_path / "in", tmp_path / "plain", model, "--precision", "fp32") == 0
    assert files(tmp_path / "plain") != want  # the pre model ran on the actors too


def test_without_ray_the_flag_says_how_to_install(tmp_path, tiny_x2, monkeypatch, capsys):
    save(tmp_path / "x.png", photo(6, 6))
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    monkeypatch.setitem(sys.modules, "ray.data", None)
    assert upscale(tmp_path / "x.png", tmp_path / "out", tiny_x2, "--ray") == 2
    err = capsys.readouterr().err.strip()
    assert err == ("sr upscale: error: --ray needs Ray Data: pip install 'ray[data]>=2.51,<2.64' "
                   "(the cluster extra: pip install '.[cluster]' in a checkout of sr)")
    assert not (tmp_path / "out").exists()


def test_the_local_path_does_not_import_ray(tmp_path, tiny_x2):
    save(tmp_path / "x.png", photo(6, 6))
    code = textwrap.dedent(f"""
        import sys
        from sr.cli import main
        assert main(["upscale", {str(tmp_path / "x.png")!r}, "-o", {str(tmp_path / "out")!r},
                     "--model", {str(tiny_x2)!r}, "--threads", "1"]) == 0
        assert "ray" not in sys.modules, "the local path imported Ray"
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_bad_ray_flags_are_clear_errors(tmp_path, tiny_x2, local_ray, capsys):
    save(tmp_path / "x.png", photo(6, 6))
    assert upscale(tmp_path / "x.png", tmp_path / "out", tiny_x2, "--ray", "--ray-actors", "0") == 2
    assert "--ray-actors must be >= 1" in capsys.readouterr().err
    assert upscale(tmp_path / "x.png", tmp_path / "out", tiny_x2, "--ray", "--device", "quantum") == 2
    assert "unknown device" in capsys.readouterr().err
    assert upscale(tmp_path / "x.png", tmp_path / "out", tiny_x2, "--ray", "--device", "cuda:1") == 2
    assert "each actor is given its own GPU" in capsys.readouterr().err
    assert upscale(tmp_path / "x.png", tmp_path / "out", tiny_x2, "--ray", "--ray-actors", "3") == 2
    assert "3 Ray actors need 3 CPUs" in capsys.readouterr().err  # the test's Ray has 2
    assert upscale(tmp_path / "x.png", tmp_path / "out", tiny_x2, "--ray", "--device", "cuda") == 2
    assert "the Ray cluster has no GPUs" in capsys.readouterr().err
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert upscale(tmp_path / "x.png", tmp_path / "out", tiny_x2, "--ray", f"127.0.0.1:{port}") == 2
    assert f"cannot reach Ray at 127.0.0.1:{port}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    (tmp_path / "a-file").write_text("not a folder")
    uncreatable = tmp_path / "a-file" / "out"  # before any image: one line, exit 1, as without --ray
    assert upscale(tmp_path / "x.png", uncreatable, tiny_x2, "--ray") == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"sr upscale: error: cannot create output folder {uncreatable} (")


def test_pool_plan_uses_gpus_where_the_cluster_has_them():
    from dataclasses import replace

    from sr.batch import BatchOptions
    from sr.batch.cluster import pool_plan

    opts = BatchOptions(inputs=("in",), output="out", ray="")
    assert pool_plan(opts, {"CPU": 16.0, "GPU": 4.0}) == (4, {"num_gpus": 1, "num_cpus": 1})
    assert pool_plan(opts, {"CPU": 16.0}) == (16, {"num_cpus": 1})
    opts = replace(opts, threads=4)
    assert pool_plan(opts, {"CPU": 16.0}) == (4, {"num_cpus": 4})
    opts = replace(opts, device="cpu")
    assert pool_plan(opts, {"CPU": 16.0, "GPU": 4.0}) == (4, {"num_cpus": 4})
    assert pool_plan(replace(opts, ray_actors=2), {"CPU": 16.0}) == (2, {"num_cpus": 4})
    with pytest.raises(BatchError, match="5 Ray actors need 20 CPUs"):
        pool_plan(replace(opts, ray_actors=5), {"CPU": 16.0})
    with pytest.raises(BatchError, match="need 5 GPUs"):
        pool_plan(replace(opts, ray_actors=5, device="cuda", threads=None), {"CPU": 16.0, "GPU": 4.0})


@pytest.mark.slow
def test_bench_upscale_ray_compares_local_and_ray_side_by_side(tmp_path, tiny_x2, local_ray, monkeypatch,
                                                               capsys):
    monkeypatch.setenv("RAY_ADDRESS", local_ray)  # the Ray run joins the test's Ray: no second one
    for i in range(2):
        save(tmp_path / "hr" / f"{i}.png", photo(24, 20, seed=i))
    report = tmp_path / "bench.json"
    assert main(["bench", "upscale", "--ray", "--model", str(tiny_x2), "--images", str(tmp_path / "hr"),
                 "--json", str(report)]) == 0
    rows = json.loads(report.read_text())
    assert [r["run"] for r in rows] == ["local", "ray, 2 actors"]
    assert all(r["done"] == 2 and r["output_mp"] == round(2 * 24 * 20 / 1e6, 3) for r in rows)
    assert all(r["identical_outputs"] and r["wall_s"] > 0 for r in rows)
    assert rows[0]["ratio"] in (1.0, None)  # None: the local run's summary rounded to 0.0 s
    if sys.platform == "linux":
        assert all(r["peak_mib"] > 10 for r in rows)
    assert "outputs byte-identical: yes" in capsys.readouterr().out


def test_the_worker_path_check_names_what_a_node_cannot_use(tmp_path):
    """What check_workers' task returns on a node without the shared filesystem (run here directly)."""
    pytest.importorskip("ray", reason="the cluster extra: pip install -e '.[cluster]'")
    from sr.batch.cluster import visible

    image = save(tmp_path / "in" / "x.png", photo(6, 6))
    assert visible([str(image)], str(tmp_path))[1] == ""
    assert visible([str(image), str(tmp_path / "gone.png")], str(tmp_path))[1] == (
        f"cannot see the input {tmp_path / 'gone.png'}")
    problem = visible([str(image)], str(tmp_path / "no-such-folder"))[1]
    assert problem.startswith(f"cannot write to the output folder {tmp_path / 'no-such-folder'} (")
