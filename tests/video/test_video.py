"""sr.video end to end on tiny generated clips: what is kept, resumption, bad input."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from sr.batch import BatchOptions, run_batch
from sr.batch.stages import make_upscaler
from sr.request import UpscaleRequest
from sr.video import VideoError
from sr.video import segments as seg
from sr.video.probe import probe
from sr.video.run import parts_folder, upscale_video
from sr.video.settings import parse_frames

av = pytest.importorskip("av")


def _streams(path: Path) -> dict:
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        pts = sorted(f.pts for f in c.decode(v))
        size, tb, codec = (v.width, v.height), v.time_base, v.codec_context.name
    with av.open(str(path)) as c:
        a = c.streams.audio
        audio = None
        if a:
            packets = [p for p in c.demux(a[0]) if p.size]
            end = max((p.pts + p.duration) * p.time_base for p in packets)
            start = min(p.pts * p.time_base for p in packets)
            audio = (end - start, a[0].codec_context.name)
        return {"size": size, "times": [t * tb for t in pts], "audio": audio,
                "title": c.metadata.get("title"), "codec": codec}


def _opts(model: str | Path, out: Path, **kw) -> BatchOptions:
    return BatchOptions(inputs=(), output=str(out), request=UpscaleRequest(model=str(model)), threads=1,
                        **kw).checked()


def test_output_keeps_frames_times_audio_and_title(make_clip, tiny_x2, tmp_path) -> None:
    src = make_clip(frames=7)
    out = tmp_path / "out" / "clip_x2.mp4"
    r = upscale_video(make_upscaler(_opts(tiny_x2, tmp_path)), src, out, _opts(tiny_x2, tmp_path),
                      segment_frames=3)
    got, want = _streams(out), _streams(src)
    assert r.frames == 7 and got["size"] == (128, 96) and got["codec"] == "h264"
    assert got["times"] == want["times"]  # every frame at its time: 24 fps kept
    assert got["title"] == "hello"
    assert got["audio"][1] == "aac" and got["audio"][0] == want["audio"][0]  # copied, same duration
    assert not parts_folder(out).exists()


def test_variable_frame_rate_is_kept(make_clip, tiny_x2, tmp_path) -> None:
    src = make_clip(frames=5, pts=[0, 1, 3, 4, 7], audio=False)
    out = tmp_path / "vfr.mp4"
    upscale_video(make_upscaler(_opts(tiny_x2, tmp_path)), src, out, _opts(tiny_x2, tmp_path),
                  segment_frames=2)
    assert _streams(out)["times"] == [Fraction(t, 24) for t in (0, 1, 3, 4, 7)]


def test_rotation_is_kept(make_clip, tiny_x2, tmp_path) -> None:
    src = make_clip(frames=2, audio=False, rotation=90)
    out = tmp_path / "rot.mp4"
    upscale_video(make_upscaler(_opts(tiny_x2, tmp_path)), src, out, _opts(tiny_x2, tmp_path))
    with av.open(str(out)) as c:
        assert next(c.decode(video=0)).rotation == 90


def test_frames_option_takes_a_part_from_time_zero(make_clip, tiny_x2, tmp_path) -> None:
    src = make_clip(frames=8)
    out = tmp_path / "part.mp4"
    opts = _opts(tiny_x2, tmp_path, frames="2:5")
    r = upscale_video(make_upscaler(opts), src, out, opts)
    got = _streams(out)
    assert r.frames == 3 and got["times"] == [Fraction(t, 24) for t in range(3)]
    assert got["audio"][0] <= Fraction(3, 24) + Fraction(1024, 48000)


def test_interrupted_run_resumes_to_the_same_bytes(make_clip, tiny_x2, tmp_path, monkeypatch,
                                                   interrupt_encoding) -> None:
    src = make_clip(frames=7)
    opts = _opts(tiny_x2, tmp_path)
    up = make_upscaler(opts)
    whole = tmp_path / "whole.mp4"
    upscale_video(up, src, whole, opts, segment_frames=2)

    resumed = tmp_path / "resumed.mp4"
    real, calls = seg.encode_segment, []
    interrupt_encoding(2)  # on the third segment
    with pytest.raises(KeyboardInterrupt):
        upscale_video(up, src, resumed, opts, segment_frames=2)
    assert not resumed.exists()
    kept = sorted(p.name for p in parts_folder(resumed).iterdir())
    assert kept == ["plan.json", "seg-00000.mp4", "seg-00001.mp4"]  # no half-written segment
    monkeypatch.setattr(seg, "encode_segment", lambda *a, **kw: (calls.append(a[1]), real(*a, **kw)))
    upscale_video(up, src, resumed, opts, segment_frames=2)
    assert calls == [4, 6]  # only the missing segments were encoded
    assert resumed.read_bytes() == whole.read_bytes()


def test_auto_picks_photo_for_h264_and_base_for_ffv1(make_clip, tmp_path) -> None:
    lossy = make_clip(frames=2, width=32, height=16, audio=False)
    lossless = make_clip("lossless.mkv", frames=2, width=32, height=16, audio=False, codec="ffv1")
    opts = _opts("auto", tmp_path)
    up = make_upscaler(opts)
    assert upscale_video(up, lossy, tmp_path / "a.mp4", opts).chosen == "photo"
    assert upscale_video(up, lossless, tmp_path / "b.mkv", opts).chosen == "asa-base"


def test_frames_decode_close_to_ffmpegs_rgb(make_clip) -> None:
    src = make_clip(frames=1, audio=False)
    info = probe(src)
    ours = next(seg.frames(info, 0, 1))[1]
    with av.open(str(src)) as c:
        theirs = next(c.decode(video=0)).to_ndarray(format="rgb24").astype(np.float32) / 255
    # same matrix and range (swscale replicates chroma, we interpolate: close, not equal)
    assert abs(float(ours.mean() - theirs.mean())) < 0.01
    assert float(np.abs(ours - theirs).mean()) < 0.05


def test_bad_videos_one_line_each_no_output_batch_goes_on(make_clip, tiny_x2, tmp_path, capsys) -> None:
    good = make_clip(frames=2, audio=False)
    (tmp_path / "text.mp4").write_text("not a video at all")
    (tmp_path / "cut.mp4").write_bytes(good.read_bytes()[:1500])
    empty = tmp_path / "empty.mp4"
    with av.open(str(empty), "w") as c:  # a container whose video stream has no frames
        s = c.add_stream("libx264", rate=24)
        s.width, s.height, s.pix_fmt = 32, 32, "yuv420p"
    outdir = tmp_path / "out"
    inputs = [str(tmp_path / n) for n in ("text.mp4", "cut.mp4", "empty.mp4")] + [str(good)]
    rc = run_batch(BatchOptions(inputs=tuple(inputs), output=str(outdir),
                                request=UpscaleRequest(model=str(tiny_x2)), threads=1))
    assert rc == 1
    err = capsys.readouterr().err
    for name in ("text.mp4", "cut.mp4", "empty.mp4"):
        lines = [ln for ln in err.splitlines() if name in ln]
        assert len(lines) == 1 and "Traceback" not in err
    assert sorted(p.name for p in outdir.iterdir()) == ["clip_x2.mp4"]


def test_parse_frames() -> None:
    assert parse_frames("2:5") == (2, 5) and parse_frames("3:") == (3, None) and parse_frames(":4") == (0, 4)
    for bad in ("5", "5:2", "a:b", "-1:3"):
        with pytest.raises(ValueError):
            parse_frames(bad)


def test_probe_refuses_a_non_video(tmp_path) -> None:
    (tmp_path / "x.mkv").write_bytes(b"\x00" * 100)
    with pytest.raises(VideoError, match="not a readable video"):
        probe(tmp_path / "x.mkv")


SRT = """1
00:00:00,000 --> 00:00:00,125
hello

2
00:00:00,125 --> 00:00:00,250
world
"""


def _with_subtitles(src: Path, srt: Path, dest: Path) -> Path:
    """``src``'s streams remuxed into ``dest`` (mkv) with ``srt``'s subtitle stream, tagged French."""
    with av.open(str(src)) as vin, av.open(str(srt)) as sin, av.open(str(dest), "w") as out:
        out.metadata.update(vin.metadata)
        streams = (vin.streams.video[0], sin.streams.subtitles[0])
        pairs = [(s, out.add_stream_from_template(s)) for s in streams]
        pairs[1][1].metadata["language"] = "fra"
        for s, o in pairs:
            for p in (vin if s.container is vin else sin).demux(s):
                if p.size:
                    p.stream = o
                    out.mux(p)
    return dest


def _subtitles(path: Path) -> tuple[str, str | None, list[tuple[bytes, Fraction, Fraction]]]:
    with av.open(str(path)) as c:
        s = c.streams.subtitles[0]
        got = [(bytes(p), p.pts * p.time_base, p.duration * p.time_base) for p in c.demux(s) if p.size]
        return s.codec_context.name, s.metadata.get("language"), got


def test_subtitles_are_copied(make_clip, tiny_x2, tmp_path) -> None:
    (tmp_path / "subs.srt").write_text(SRT)
    src = _with_subtitles(make_clip(frames=6, audio=False), tmp_path / "subs.srt", tmp_path / "subbed.mkv")
    codec, lang, cues = _subtitles(src)
    assert codec in {"srt", "subrip"} and lang == "fra" and len(cues) == 2  # the input is what we meant
    out = tmp_path / "out.mkv"
    opts = _opts(tiny_x2, tmp_path)
    # two segments from an MKV (time base 1/1000, which the MP4 segments store as 1/16000)
    upscale_video(make_upscaler(opts), src, out, opts, segment_frames=4)
    assert _subtitles(out) == (codec, lang, cues)  # same codec, tag, text and times: not re-encoded
    assert _streams(out)["size"] == (128, 96)


@pytest.mark.parametrize("codec", ["h265", "av1", "vp9"])
def test_other_output_codecs(codec, make_clip, tiny_x2, tmp_path) -> None:
    from sr.video.settings import CODECS

    try:
        av.codec.Codec(CODECS[codec][0], "w")
    except Exception:  # noqa: BLE001 - any failure to find it: this wheel has no such encoder
        pytest.skip(f"this PyAV wheel has no {CODECS[codec][0]} encoder")
    src = make_clip(frames=4, audio=True)
    opts = _opts(tiny_x2, tmp_path, video_codec=codec)
    out = tmp_path / "out.mp4"
    # segments of 3 + 1 frames: a 1-frame x265 segment with B-frames was refused by the MP4 muxer
    upscale_video(make_upscaler(opts), src, out, opts, segment_frames=3)
    got, want = _streams(out), _streams(src)
    decoders = {"h265": {"hevc"}, "av1": {"av1", "libdav1d", "libaom-av1"}, "vp9": {"vp9", "libvpx-vp9"}}
    assert got["codec"] in decoders[codec]
    assert got["size"] == (128, 96) and got["times"] == want["times"] and got["audio"] == want["audio"]


def test_a_resumed_video_reports_what_it_upscaled_and_what_it_kept(make_clip, tiny_x2, tmp_path,
                                                                    monkeypatch, capsys,
                                                                    interrupt_encoding) -> None:
    monkeypatch.setattr(seg, "SEGMENT_FRAMES", 2)  # segments of 2 frames: 4 for 7 frames
    src = make_clip(frames=7)
    opts = BatchOptions(inputs=(str(src),), output=str(tmp_path / "out"),
                        request=UpscaleRequest(model=str(tiny_x2)), threads=1)
    real = seg.encode_segment
    interrupt_encoding(2)
    with pytest.raises(KeyboardInterrupt):
        run_batch(opts, prog="sr upscale")
    err = capsys.readouterr().err
    assert (f"sr upscale: {src}: interrupted: 4 of 7 frames kept (2 of 4 segments, in "
            f"{parts_folder(tmp_path / 'out' / 'clip_x2.mp4')}); the same command resumes from there "
            "(a run resumes by whole segments of 2 frames: the one in progress is redone)") in err
    monkeypatch.setattr(seg, "encode_segment", real)
    assert run_batch(opts) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "clip_x2.mp4:" in ln)
    assert ": 7 frames: 3 upscaled, 4 kept from the earlier run, in " in line
    assert "output MP/s over the 3 upscaled; " in line  # its rates: the next test


def test_interrupting_a_clip_of_one_segment_says_nothing_is_kept(make_clip, tiny_x2, tmp_path, capsys,
                                                                  interrupt_encoding) -> None:
    src = make_clip(frames=5, audio=False)  # shorter than one segment (SEGMENT_FRAMES)
    interrupt_encoding(0)
    with pytest.raises(KeyboardInterrupt):
        run_batch(BatchOptions(inputs=(str(src),), output=str(tmp_path / "out"),
                               request=UpscaleRequest(model=str(tiny_x2)), threads=1))
    err = capsys.readouterr().err
    assert (f"{src}: interrupted: nothing kept for the next run (a run resumes by whole segments of "
            f"{seg.SEGMENT_FRAMES} frames, and this video's 5 frames are one segment, unfinished)") in err
    # and nothing is left: no segment folder holding only its plan
    assert not parts_folder(tmp_path / "out" / "clip_x2.mp4").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []


def test_video_result_rates_count_the_upscaled_frames_only() -> None:
    from sr.video.run import VideoResult

    fresh = VideoResult(frames=168, out_pixels=168 * 10**6, seconds=6.8, model="m")
    assert fresh.describe() == "168 frames in 6.8 s (24.71 frames/s, 24.71 output MP/s; m)"
    resumed = VideoResult(frames=168, out_pixels=168 * 10**6, seconds=6.8, model="m", kept=120)
    assert resumed.upscaled == 48 and resumed.upscaled_pixels == 48 * 10**6
    assert resumed.describe(" on 2 Ray actor(s)") == (
        "168 frames: 48 upscaled, 120 kept from the earlier run, in 6.8 s on 2 Ray actor(s) "
        "(7.06 frames/s, 7.06 output MP/s over the 48 upscaled; m)")
    joined = VideoResult(frames=168, out_pixels=168, seconds=0.3, model="m", kept=168)
    assert joined.describe() == "168 frames, all kept from the earlier run, joined in 0.3 s (m)"


@pytest.mark.parametrize("change", [{"look": 0.5}, {"denoise": 0.5}])
def test_a_resume_with_another_look_or_denoise_starts_afresh(make_clip, tmp_path, change) -> None:
    """The segments' plan names look and denoise: a resume with another one does not mix frames."""
    from types import SimpleNamespace

    from sr.video.run import plan_video

    src, out = make_clip(frames=3, audio=False), tmp_path / "clip_x2.mp4"
    up = SimpleNamespace(plan_size=lambda h, w, *a: ((2 * h, 2 * w), None))  # the size check only

    def plan(**request):
        opts = BatchOptions(inputs=(), output=str(tmp_path), threads=1,
                            request=UpscaleRequest(model="photo", **request)).checked()
        return plan_video(up, src, out, opts, segment_frames=2)

    plan().paths[0].write_bytes(b"a finished segment")
    assert plan().done_frames == 2  # the same plan keeps it
    assert plan(**change).done_frames == 0  # another look (or denoise): afresh


def test_interrupted_while_joining_keeps_every_segment(make_clip, tiny_x2, tmp_path, monkeypatch) -> None:
    import sr.video.run as video_run

    def stop(*args, **kw):
        raise KeyboardInterrupt

    src, out = make_clip(frames=3, audio=False), tmp_path / "clip_x2.mp4"
    opts = _opts(tiny_x2, tmp_path)
    monkeypatch.setattr(video_run, "join", stop)
    with pytest.raises(video_run.VideoInterrupted) as e:
        upscale_video(make_upscaler(opts), src, out, opts, segment_frames=2)
    assert str(e.value) == (f"{src}: interrupted: all 3 frames kept (2 segments, in {parts_folder(out)}); "
                            "the same command joins them")
    assert e.value.kept == 3
