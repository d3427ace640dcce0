"""The video path's acceptance check on the full clip (research/video_clips.py): 48 frames of 512x288 H.264 at
24 fps with an AAC track and a title, x2 through ``--model auto``. About a minute or more on one
thread with the shipped photo weights, so not in the default run: ``pytest -m full_clip``."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from sr.batch import BatchOptions
from sr.batch.stages import make_upscaler
from sr.request import UpscaleRequest
from sr.resize import imresize
from sr.video.run import upscale_video

av = pytest.importorskip("av")
clips = pytest.importorskip("research.video_clips")
scoring = pytest.importorskip("research.video_scoring")

pytestmark = [pytest.mark.slow, pytest.mark.full_clip,
              pytest.mark.skipif(not clips.VALID.is_dir(), reason=f"{clips.VALID} absent")]


def _audio_seconds(path) -> Fraction:
    with av.open(str(path)) as c:
        packets = [p for p in c.demux(c.streams.audio[0]) if p.size]
        end = max((p.pts + p.duration) * p.time_base for p in packets)
        return end - min(p.pts * p.time_base for p in packets)


def test_full_clip_done_when(tmp_path) -> None:
    hr = clips.mosaic_frames(48, 3)
    lr = np.stack([imresize(f, 0.5) for f in hr])
    src = tmp_path / "clip.mp4"
    clips.write_clip(src, lr, crf=23)
    out = tmp_path / "clip_x2.mp4"
    opts = BatchOptions(inputs=(), output=str(tmp_path), request=UpscaleRequest(model="auto"),
                        threads=1).checked()
    r = upscale_video(make_upscaler(opts), src, out, opts)
    assert r.chosen == "photo"
    with av.open(str(out)) as c:
        v = c.streams.video[0]
        frames = [f for f in c.decode(v)]
        assert len(frames) == 48 and v.average_rate == 24 and (v.width, v.height) == (1024, 576)
        assert c.metadata.get("title") == "sr video test"
    assert _audio_seconds(out) == _audio_seconds(src)
    hr_y = [scoring.y_of(f) for f in hr]
    ys = scoring.decoded_y(out)
    bicubic = [scoring.y_of(f) for f in scoring.Methods(1).frames("bicubic", src)]
    assert scoring.mean_psnr(ys, hr_y) >= scoring.mean_psnr(bicubic, hr_y) + 1.0
    assert scoring.flicker(ys) <= 1.2 * scoring.flicker(hr_y)
