"""FrameUpscaler: a clip's frames get auto's choice and the size plan once, then the planned path."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sr.inference import Upscaler
from sr.inference.family import FamilyEngine
from sr.io import DecodedImage
from sr.lossy import Compression
from sr.request import UpscaleRequest
from sr.video.run import FrameUpscaler


@pytest.mark.parametrize("model, lossless", [("auto", False), ("auto", True), ("tiny", True)])
def test_frames_are_planned_once_and_equal_per_frame_runs(weights_dir, monkeypatch, model, lossless) -> None:
    up = Upscaler(model, device="cpu", weights_dir=None if model == "auto" else weights_dir, threads=1)
    request = UpscaleRequest(outscale=3)
    info = SimpleNamespace(codec="h264" if not lossless else "ffv1", lossless=lossless)
    rng = np.random.default_rng(0)
    frames = [rng.random((12, 10, 3), dtype=np.float32) for _ in range(3)]
    source = Compression(format=info.codec.upper(), lossy=not lossless)
    expected = [up.run(DecodedImage(f), request, source=source, quantize=True) for f in frames]

    plans, chosen = [], []
    plan_size, choose = FamilyEngine.plan_size, type(up).choose
    monkeypatch.setattr(FamilyEngine, "plan_size",
                        lambda self, *a, **k: plans.append(a) or plan_size(self, *a, **k))
    monkeypatch.setattr(type(up), "choose", lambda self, *a, **k: chosen.append(a) or choose(self, *a, **k))
    upscale = FrameUpscaler(up, info, SimpleNamespace(request=request))
    assert upscale.last is None
    for frame, want in zip(frames, expected, strict=True):
        out = upscale(frame)
        np.testing.assert_array_equal(out, want.image.pixels)
        assert out.dtype == np.uint8 and upscale.last is not None
        assert (upscale.last.model, upscale.last.choice) == (want.model, want.choice)
    assert len(plans) == 1 and len(chosen) == 1  # once per clip, not per frame
