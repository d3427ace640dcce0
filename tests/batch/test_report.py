"""What the user is told: the on-disk count an interrupted run reports."""

from __future__ import annotations

import os
from pathlib import Path

from sr.batch.jobs import Job
from sr.batch.report import OnDisk


def test_on_disk_counts_outputs_made_or_replaced_since_the_snapshot(tmp_path: Path) -> None:
    jobs = [Job(tmp_path / f"in{i}.png", Path(f"in{i}.png"), out=tmp_path / f"out{i}.png") for i in range(4)]
    jobs[1].out.write_bytes(b"old")  # an --overwrite run: it existed before
    jobs[2].out.write_bytes(b"old")
    snapshot = OnDisk(jobs)
    assert snapshot.written() == 0
    jobs[0].out.write_bytes(b"new")  # made by a worker whose report never reached the driver
    replacement = tmp_path / ".tmp"
    replacement.write_bytes(b"new")
    os.replace(replacement, jobs[1].out)  # replaced atomically, as sr.io writes: a new inode
    assert snapshot.written() == 2  # out2 untouched, out3 never written


def _fake_cpu(monkeypatch, kind: str) -> None:
    monkeypatch.setattr("sr.inference.precision.cpu_bf16_kind", lambda: kind)
    monkeypatch.setattr("sr.inference.devices.cpu_bf16_kind", lambda: kind)
    monkeypatch.setattr("sr.inference.precision.cpu_runs_bf16", lambda: kind != "emulated")
    monkeypatch.setattr("sr.inference.precision.cpu_model", lambda: None)  # the kind's rule, not a model's


def test_verbose_says_what_precision_runs_and_why(monkeypatch) -> None:
    from sr.batch.report import precision_line
    from sr.inference import Upscaler

    _fake_cpu(monkeypatch, "avx512_bf16")
    up = Upscaler("asa-base", device="cpu", threads=1)  # the package's own files: on the bf16 record
    assert precision_line(up) == ("precision: bf16: AVX512_BF16, measured 1.9-2.3x fp32 from 800 px; "
                                  "inputs under 0.26 MP run fp32 (bf16 measured slower there)")
    _fake_cpu(monkeypatch, "amx")
    assert precision_line(up) == "precision: bf16: AMX-BF16, measured 2.4-2.7x fp32 end to end"
    _fake_cpu(monkeypatch, "emulated")
    assert precision_line(up).startswith("precision: fp32: no AMX or AVX512_BF16 on this CPU")
    forced = Upscaler("asa-base", device="cpu", threads=1, precision="fp32")
    assert precision_line(forced) == "precision: fp32: asked for"
