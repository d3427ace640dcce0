"""``sr bench contention``: configs, the busy load, one arm's counting, a tiny run, bad options."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from benchmarks.contention import busy_load, parse_configs, run_arm
from sr.cli import main
from sr.errors import CLIError


def test_configs_parse_workers_by_threads():
    assert parse_configs("1x1, 2X1,1x2,") == [(1, 1), (2, 1), (1, 2)]
    for bad in ("2y1", "0x1", "1x", "", "ax2"):
        with pytest.raises(CLIError):
            parse_configs(bad)


def test_busy_load_spins_while_inside_and_is_gone_after():
    with busy_load(2, seconds=30) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
        cpu0 = [_cpu_ticks(p.pid) for p in procs]
        time.sleep(0.5)
        assert all(_cpu_ticks(p.pid) > c for p, c in zip(procs, cpu0, strict=True))  # they do burn CPU
    assert all(p.returncode is not None for p in procs)


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_an_arm_counts_every_workers_calls_in_inference_mode():
    seen: list[tuple[str, bool]] = []

    def make(i: int):
        def call() -> None:
            seen.append((threading.current_thread().name, torch.is_inference_mode_enabled()))
            time.sleep(0.01)
        return call

    n, elapsed, cpu, latencies = run_arm(make, workers=3, seconds=0.2)
    assert n == len(seen) == len(latencies) and elapsed >= 0.2 and cpu >= 0
    assert len({name for name, _ in seen}) == 3 and all(mode for _, mode in seen)
    assert all(lat >= 0.01 for lat in latencies)


def test_tiny_run_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "contention.json"
    rc = main(["bench", "contention", "--model", "asa-base-x2", "--precision", "fp32", "--tile", "16",
               "--configs", "1x1,2x1", "--busy", "1", "--seconds", "0.2", "--rounds", "1",
               "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| torch | busy | 2x1 |" in text and "CPU ms per tile" in text
    data = json.loads(out.read_text())
    rows = {(r["load"], r["workers"], r["threads"]): r for r in data["rows"]}
    assert set(rows) == {("none", 1, 1), ("none", 2, 1), ("busy", 1, 1), ("busy", 2, 1)}
    assert all(r["tiles_per_s"] > 0 and r["forwards"] >= r["workers"] and r["cpu_ms"] > 0
               for r in rows.values())
    assert data["busy_processes"] == 1 and data["openvino_psnr_db"] is None


def test_openvino_backend_runs_the_export_and_agrees_with_torch(tmp_path, capsys):
    pytest.importorskip("openvino")
    pytest.importorskip("onnxscript")
    out = tmp_path / "contention.json"
    rc = main(["bench", "contention", "--model", "asa-base-x2", "--precision", "fp32", "--tile", "32",
               "--backends", "torch,openvino", "--configs", "1x1", "--loads", "none", "--seconds", "0.2",
               "--rounds", "1", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert {r["backend"] for r in data["rows"]} == {"torch", "openvino"}
    assert data["openvino_psnr_db"] > 50  # the static-graph export in fp32: float-level agreement


@pytest.mark.parametrize("argv, message", [
    (["--configs", "2y1"], "is not WORKERSxTHREADS"),
    (["--backends", "tensorrt"], "unknown backend(s) tensorrt"),
    (["--loads", "heavy"], "unknown load(s) heavy"),
    (["--seconds", "0"], "--seconds > 0"),
])
def test_bad_options_are_one_clear_line(argv, message, capsys):
    rc = main(["bench", "contention", "--precision", "fp32", "--tile", "16", *argv])
    err = capsys.readouterr().err
    assert rc != 0 and message in err and "Traceback" not in err
