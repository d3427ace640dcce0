"""``sr upscale clip.mp4 --ray``: the segments on a local Ray's actors give the local run's bytes."""

from __future__ import annotations

import pytest

from sr.batch import BatchOptions, run_batch
from sr.request import UpscaleRequest
from sr.video import segments as seg

pytest.importorskip("av")


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="the cluster extra: pip install -e '.[cluster]'")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.mark.slow
def test_ray_output_equals_local(make_clip, tiny_x2, tmp_path, local_ray, monkeypatch) -> None:
    monkeypatch.setattr(seg, "SEGMENT_FRAMES", 2)  # 4 segments for 2 actors
    src = make_clip(frames=7)

    def run(out: str, ray: str | None) -> int:
        return run_batch(BatchOptions(inputs=(str(src),), output=str(tmp_path / out),
                                      request=UpscaleRequest(model=str(tiny_x2)), threads=1, ray=ray,
                                      ray_actors=2 if ray is not None else None))

    assert run("local", None) == 0
    assert run("ray", "") == 0
    local, ray = tmp_path / "local" / "clip_x2.mp4", tmp_path / "ray" / "clip_x2.mp4"
    assert ray.read_bytes() == local.read_bytes()
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == ["clip_x2.mp4"]  # no segment folder left


@pytest.mark.slow
def test_ray_resumes_a_local_run_and_reports_the_kept_frames(make_clip, tiny_x2, tmp_path, local_ray,
                                                             monkeypatch, capsys, interrupt_encoding) -> None:
    monkeypatch.setattr(seg, "SEGMENT_FRAMES", 2)
    src = make_clip(frames=7)

    def run(ray: str | None) -> int:
        return run_batch(BatchOptions(inputs=(str(src),), output=str(tmp_path / "out"),
                                      request=UpscaleRequest(model=str(tiny_x2)), threads=1, ray=ray,
                                      ray_actors=1 if ray is not None else None))

    real = seg.encode_segment
    interrupt_encoding(2)  # on the third segment
    with pytest.raises(KeyboardInterrupt):
        run(None)
    monkeypatch.setattr(seg, "encode_segment", real)
    capsys.readouterr()
    assert run("") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "clip_x2.mp4:" in ln)
    assert ": 7 frames: 3 upscaled, 4 kept from the earlier run, in " in line and "on 1 Ray actor(s)" in line
