"""What the user is told: the on-disk count an interrupted run reports."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

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
    monkeypatch.setattr("sr.cpu.cpu_bf16_kind", lambda: kind)
    monkeypatch.setattr("sr.inference.precision.cpu_runs_bf16", lambda: kind != "emulated")
    monkeypatch.setattr("sr.inference.precision.cpu_model", lambda: None)  # the kind's rule, not a model's


def test_verbose_says_what_precision_runs_and_why(monkeypatch) -> None:
    from sr.batch.report import precision_lines
    from sr.inference import Upscaler
    from sr.request import UpscaleRequest

    _fake_cpu(monkeypatch, "avx512_bf16")
    up = Upscaler("asa-base", device="cpu", threads=1)  # the package's own files: on the bf16 record
    x2 = UpscaleRequest(model="asa-base", scale=2)
    assert precision_lines(up, x2) == [
        "precision: asa-base-x2: bf16: AVX512_BF16, measured 1.9-2.3x fp32 from 800 px; "
        "inputs under 0.26 MP run fp32 (bf16 measured slower there)"]
    _fake_cpu(monkeypatch, "amx")
    assert precision_lines(up, x2) == [
        "precision: asa-base-x2: bf16: AMX-BF16, measured 2.4-2.7x fp32 end to end"]
    _fake_cpu(monkeypatch, "emulated")
    assert precision_lines(up, x2)[0].startswith(
        "precision: asa-base-x2: fp32: no AMX or AVX512_BF16 on this CPU")
    forced = Upscaler("asa-base", device="cpu", threads=1, precision="fp32")
    assert precision_lines(forced, x2) == ["precision: asa-base-x2: fp32: asked for"]


def _without_natural_on_record(monkeypatch) -> None:
    """photo-natural's files off the bf16 record (a retrained file before its cost is measured)."""
    from sr.inference import precision

    record = {k: v for k, v in precision.BF16_PSNR_COST_DB.items() if not k.startswith("photo-natural")}
    monkeypatch.setattr(precision, "BF16_PSNR_COST_DB", record)


def test_verbose_auto_with_a_look_names_each_side_and_what_it_runs_in(monkeypatch) -> None:
    """auto's photo side with --look blends in photo-natural: with that file off the record the blend
    runs fp32 while the lossless side runs bf16, and -v says so for each (not the lossless side's
    precision for both)."""
    from sr.batch.report import precision_lines
    from sr.inference import Upscaler
    from sr.request import UpscaleRequest

    _fake_cpu(monkeypatch, "amx")
    _without_natural_on_record(monkeypatch)
    up = Upscaler("auto", device="cpu", threads=1, look=0.5)
    lines = precision_lines(up, UpscaleRequest(model="auto", look=0.5, scale=2))
    assert lines == [
        "precision: asa-base-x2 (asa-base side, lossless inputs): bf16: AMX-BF16, measured 2.4-2.7x fp32 "
        "end to end",
        "precision: photo-x2@look=0.5 (photo side, lossy inputs): fp32: no measured bf16 quality cost "
        "for photo-natural-x2",
    ]
    # each side's own answer is what its passes load in
    assert up.sides["photo"].dtype_for(2) == torch.float32
    assert up.sides["asa-base"].dtype_for(2) == torch.bfloat16


def test_verbose_names_the_scales_the_request_runs(monkeypatch) -> None:
    """--scale 4 names the x4 network (not the family's smallest), --scale 3 with auto and denoise
    each side's x3, --outscale 8 both passes' networks, --width (each file's size decides) every scale."""
    from sr.batch.report import precision_lines, run_scales
    from sr.inference import Upscaler
    from sr.request import UpscaleRequest

    _fake_cpu(monkeypatch, "amx")
    _without_natural_on_record(monkeypatch)
    natural = Upscaler("photo-natural", device="cpu", threads=1)
    lines = precision_lines(natural, UpscaleRequest(model="photo-natural", scale=4))
    assert lines == ["precision: photo-natural-x4: fp32: no measured bf16 quality cost for photo-natural-x4"]
    auto = Upscaler("auto", device="cpu", threads=1, denoise=0.5)
    lines = precision_lines(auto, UpscaleRequest(model="auto", denoise=0.5, scale=3))
    assert [ln.split(":")[1].strip() for ln in lines] == [
        "asa-base-x3 (asa-base side, lossless inputs)", "photo-x3@denoise=0.5 (photo side, lossy inputs)"]
    base = Upscaler("asa-base", device="cpu", threads=1)
    assert run_scales(base, UpscaleRequest(model="asa-base", outscale=8)) == [2, 4]
    eight = precision_lines(base, UpscaleRequest(model="asa-base", outscale=8))
    assert [ln.split(":")[1].strip() for ln in eight] == ["asa-base-x2", "asa-base-x4"]
    assert run_scales(base, UpscaleRequest(model="asa-base", width=1000)) == [2, 3, 4]


def _run_verbose(tmp_path: Path, capsys, image: Image.Image, name: str, **request) -> str:
    """`sr upscale -v` of one image (written as ``name``): the file's own line."""
    from sr.batch.options import BatchOptions
    from sr.batch.run import run_batch
    from sr.request import UpscaleRequest

    src = tmp_path / name
    image.save(src, quality=80) if name.endswith(".jpg") else image.save(src)
    opts = BatchOptions(inputs=(str(src),), output=str(tmp_path / "out"), verbose=True, threads=1,
                        request=UpscaleRequest(**request), overwrite=True)
    assert run_batch(opts, prog="sr upscale") == 0
    out = capsys.readouterr().out
    return next(ln for ln in out.splitlines() if ln.startswith(f"{src} -> "))


def test_each_files_line_says_what_ran_in_which_precision_per_pass(monkeypatch, tmp_path, capsys) -> None:
    """The per-file line names every network that ran and the type it ran in, as that file's size
    decided (on this kind of CPU a small input runs fp32 though the scale's large inputs run bf16)."""
    _fake_cpu(monkeypatch, "avx512_bf16")  # bf16 from 512 x 512 pixels: these inputs run fp32
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (24, 20, 3), dtype=np.uint8))
    line = _run_verbose(tmp_path, capsys, img, "a.png", model="asa-base", outscale=8)
    assert "(asa-base-x2 in fp32 + asa-base-x4 in fp32)" in line
    line = _run_verbose(tmp_path, capsys, img, "b.jpg", model="auto", look=0.5, scale=3)
    assert "(auto: photo, look 0.5 (JPEG, quality ~80): photo-x3@look=0.5 in fp32)" in line


@pytest.mark.cpu_bf16
def test_a_files_line_says_bf16_where_it_ran_bf16(monkeypatch, tmp_path, capsys) -> None:
    _fake_cpu(monkeypatch, "amx")  # bf16 at every size
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (24, 20, 3), dtype=np.uint8))
    line = _run_verbose(tmp_path, capsys, img, "c.png", model="asa-base", scale=4)
    assert "(asa-base-x4 in bf16)" in line
