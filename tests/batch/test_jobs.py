"""Planning outputs: the hint a per-file problem gives names options the way the caller spells them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sr.batch import BatchOptions
from sr.batch.jobs import Job, plan_outputs


def _existing_output(tmp_path: Path, opts: BatchOptions) -> Job:
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "in" / "a.png").write_bytes(b"png")
    (tmp_path / "out" / "a_x2.png").write_bytes(b"old")
    job = Job(tmp_path / "in" / "a.png", Path("a.png"))
    plan_outputs([job], tmp_path / "out", "_x2", opts)
    return job


def test_an_existing_output_names_the_options_by_field_for_python_callers(tmp_path: Path) -> None:
    opts = BatchOptions(inputs=(str(tmp_path / "in"),), output=str(tmp_path / "out"))
    job = _existing_output(tmp_path, opts)
    assert job.problem == f"output {job.out} exists (use overwrite or skip_existing)"
    assert not job.skip


def test_an_existing_output_names_the_options_as_the_caller_spells_them(tmp_path: Path) -> None:
    opts = replace(BatchOptions(inputs=(str(tmp_path / "in"),), output=str(tmp_path / "out")),
                   option_name=lambda field: f"<{field.upper()}>")
    job = _existing_output(tmp_path, opts)
    assert job.problem == f"output {job.out} exists (use <OVERWRITE> or <SKIP_EXISTING>)"


def test_skip_existing_skips_instead_of_refusing(tmp_path: Path) -> None:
    opts = BatchOptions(inputs=(str(tmp_path / "in"),), output=str(tmp_path / "out"), skip_existing=True)
    job = _existing_output(tmp_path, opts)
    assert job.skip and job.problem is None
