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
