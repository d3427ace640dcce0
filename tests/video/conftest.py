"""Tiny generated clips for the video tests (a few frames, tens of pixels: CI stays fast)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")


def write_clip(path: Path, frames: int = 6, width: int = 64, height: int = 48, audio: bool = True,
               title: str | None = "hello", codec: str = "libx264", pts: list[int] | None = None,
               rate: int = 24, rotation: int = 0) -> Path:
    """A pan across random texture, 24 fps (or the frame times ``pts`` in 1/rate s), with a
    mono AAC tone as long as the video and a title tag."""
    with av.open(str(path), "w") as out:
        if title is not None:
            out.metadata["title"] = title
        v = out.add_stream(codec, rate=rate)
        v.width, v.height = width, height
        v.pix_fmt = "yuv420p"
        if rotation:
            v.set_display_rotation(rotation)
        if codec == "libx264":
            v.options = {"crf": "23"}
        a = None
        if audio:
            a = out.add_stream("aac", rate=48000)
            a.layout = "mono"
        base = np.random.default_rng(0).integers(0, 255, (height, width + frames, 3), dtype=np.uint8)
        times = pts if pts is not None else list(range(frames))
        for i, t in enumerate(times):
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(base[:, i:i + width]), format="rgb24")
            f.pts = t
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode(None):
            out.mux(p)
        if a is not None:
            total, t = int(48000 * (times[-1] + 1) / rate), 0
            while t < total:
                k = min(1024, total - t)
                tone = (0.1 * np.sin(np.arange(t, t + k) / 20)).astype(np.float32)[None]
                af = av.AudioFrame.from_ndarray(tone, format="flt", layout="mono")
                af.sample_rate, af.pts = 48000, t
                for p in a.encode(af):
                    out.mux(p)
                t += k
            for p in a.encode(None):
                out.mux(p)
    return path


@pytest.fixture
def make_clip(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "clip.mp4", **kw) -> Path:
        return write_clip(tmp_path / name, **kw)

    return make


@pytest.fixture
def interrupt_encoding(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """interrupt_encoding(n): Ctrl-C when a run starts encoding its segment number n (0-based);
    ``monkeypatch.undo()`` or setting ``encode_segment`` back ends it."""
    from sr.video import segments as seg

    def arm(segments: int) -> None:
        real, calls = seg.encode_segment, []

        def encode(*args, **kw):
            calls.append(args[1])
            if len(calls) > segments:
                raise KeyboardInterrupt
            return real(*args, **kw)

        monkeypatch.setattr(seg, "encode_segment", encode)

    return arm
