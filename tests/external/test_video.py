"""Videos through an outside model and a --pre model: frames, times and sound kept, and an
interrupted run resumes to the same bytes (the clips of tests/video, a few frames of 64 x 48)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from sr.batch import BatchOptions
from sr.batch.stages import make_upscaler
from sr.cli import main
from sr.metrics import float_psnr, rgb_to_y
from sr.request import UpscaleRequest
from tests.external.models import spandrel_call

av = pytest.importorskip("av")
spandrel = pytest.importorskip("spandrel", reason="the models extra: pip install -e '.[models]'")

from sr.video import segments as seg  # noqa: E402 - needs av
from sr.video.run import parts_folder, upscale_video  # noqa: E402
from tests.video.conftest import write_clip  # noqa: E402 - the video tests' own clips


@pytest.fixture(autouse=True)
def _restore_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # sr.cli.main rewrites sys.argv


def frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]


def streams(path: Path) -> dict:
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        times = sorted(f.pts * v.time_base for f in c.decode(v))
        size = (v.width, v.height)
    with av.open(str(path)) as c:
        a = c.streams.audio[0]
        packets = [p for p in c.demux(a) if p.size]
        length = max((p.pts + p.duration) * p.time_base for p in packets) - min(p.pts * p.time_base
                                                                                 for p in packets)
        return {"size": size, "times": times, "audio": (length, a.codec_context.name)}


def test_a_clip_through_an_outside_model_and_a_pre_model(tmp_path, model_files, capsys):
    src = write_clip(tmp_path / "clip.mp4", frames=5)
    m, p = model_files["compact-x2"], model_files["compact-1x"]
    out = tmp_path / "out"
    assert main(["upscale", str(src), "-o", str(out), "--model", str(m.safetensors), "--pre", str(p.pth),
                 "--threads", "1", "--precision", "fp32", "--crf", "12"]) == 0
    capsys.readouterr()
    got, want = streams(out / "clip_x2.mp4"), streams(src)
    assert got["size"] == (128, 96) and got["times"] == want["times"]
    assert got["audio"] == want["audio"]  # the sound copied, same length and codec
    # each frame is the two models in a row on the decoded frame (up to the encoder's loss), and
    # clearly not the upscaler alone
    for x, y in zip(frames(src)[::2], frames(out / "clip_x2.mp4")[::2], strict=True):
        xf = x.astype(np.float32) / 255
        chain = spandrel_call(m.pth, np.clip(spandrel_call(p.pth, xf), 0, 1))
        alone = spandrel_call(m.pth, xf)
        got = rgb_to_y(y.astype(np.float64)) / 255  # luma: the encoder keeps chroma at half size
        near = float_psnr(got, rgb_to_y(chain * 255) / 255)  # 43.8 dB measured
        far = float_psnr(got, rgb_to_y(alone * 255) / 255)  # 33.6 dB
        assert near > 38 and near > far + 5


def test_an_interrupted_clip_resumes_to_the_same_bytes(tmp_path, model_files, monkeypatch):
    src = write_clip(tmp_path / "clip.mp4", frames=5, audio=True)
    request = UpscaleRequest(model=str(model_files["esrgan-x2"].pth), pre=str(model_files["nafnet"].pth),
                             precision="fp32")
    opts = BatchOptions(inputs=(), output=str(tmp_path), request=request, threads=1).checked()
    up = make_upscaler(opts)
    whole = tmp_path / "whole.mp4"
    upscale_video(up, src, whole, opts, segment_frames=2)

    resumed = tmp_path / "resumed.mp4"
    real, calls = seg.encode_segment, []

    def stop_on_the_second(*args, **kw):
        if args[1] >= 2:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(seg, "encode_segment", stop_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        upscale_video(up, src, resumed, opts, segment_frames=2)
    assert sorted(q.name for q in parts_folder(resumed).iterdir()) == ["plan.json", "seg-00000.mp4"]
    monkeypatch.setattr(seg, "encode_segment", lambda *a, **kw: (calls.append(a[1]), real(*a, **kw))[1])
    upscale_video(up, src, resumed, opts, segment_frames=2)
    assert calls == [2, 4]  # only the missing segments were encoded
    assert resumed.read_bytes() == whole.read_bytes()
    assert streams(resumed)["size"] == (128, 96)
