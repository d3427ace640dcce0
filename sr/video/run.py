"""One video job: probe, plan the segments, encode the missing ones, join, clean up.

A segment folder ``.<output name>.sr-parts`` next to the output holds the committed segments and what
they were made from (``plan.json``); a later run with the same input and settings picks up where the
last one stopped, anything else starts it afresh. It is removed once the output is written.
A run resumes by whole segments (:data:`sr.video.segments.SEGMENT_FRAMES` frames): Ctrl-C loses the
segment in progress, and says so (:class:`VideoInterrupted`); a clip of one segment or less is
redone from its start. Smaller segments for short clips would buy little: the work lost is bounded
by one segment on any clip, and every segment adds a keyframe (and one encoder start) to the output.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import VideoError
from . import segments as seg
from .join import join
from .probe import VideoInfo, probe
from .settings import VideoOptions, VideoSettings

if TYPE_CHECKING:
    from ..inference import Upscaler, UpscaleResult
    from ..inference.engine import PlannedUpscale


@dataclass
class VideoResult:
    frames: int
    out_pixels: int  # all frames' output pixels
    seconds: float
    model: str
    choice: str = ""  # --model auto: what was chosen and why
    chosen: str = ""
    kept: int = 0  # frames of segments an earlier run committed: joined, not upscaled by this run

    @property
    def upscaled(self) -> int:
        """The frames this run upscaled."""
        return self.frames - self.kept

    @property
    def upscaled_pixels(self) -> int:
        return self.out_pixels // self.frames * self.upscaled if self.frames else 0

    def describe(self, where: str = "") -> str:
        """The line a batch prints when the video is done ('168 frames in 6.8 s (24.84 frames/s, ...)'),
        its rates over the frames this run upscaled: a resumed run's kept frames are counted apart.
        ``where``: e.g. ' on 2 Ray actor(s)'."""
        s, model = self.seconds, self.choice or self.model
        fps = self.upscaled / s if s > 0 else 0.0
        mps = self.upscaled_pixels / 1e6 / s if s > 0 else 0.0
        rates = f"{fps:.2f} frames/s, {mps:.2f} output MP/s"
        if not self.kept:
            return f"{self.frames} frames in {s:.1f} s{where} ({rates}; {model})"
        if not self.upscaled:
            return f"{self.frames} frames, all kept from the earlier run, joined in {s:.1f} s ({model})"
        return (f"{self.frames} frames: {self.upscaled} upscaled, {self.kept} kept from the earlier run, "
                f"in {s:.1f} s{where} ({rates} over the {self.upscaled} upscaled; {model})")


def settings_of(opts: VideoOptions) -> VideoSettings:
    from .settings import parse_frames

    return VideoSettings(codec=opts.video_codec, crf=opts.crf,
                         frames=parse_frames(opts.frames) if opts.frames else None)


def parts_folder(out: Path) -> Path:
    return out.with_name(f".{out.name}.sr-parts")


def _span(info: VideoInfo, settings: VideoSettings) -> tuple[int, int]:
    a, b = settings.frames or (0, None)
    b = info.frames if b is None else min(b, info.frames)
    if a >= b:
        raise VideoError(f"--frames starts at {a}, but the video has {info.frames} frames")
    return a, b


class FrameUpscaler:
    """float RGB frame -> uint8 RGB output frame, with the batch's model and size options; for
    ``--model auto`` the video's codec says lossy (photo family) or lossless (the default family).
    The choice and the size plan are made once, on the first frame (every frame of a clip has its
    size), and each frame runs through that plan. ``last`` is the newest frame's result (its model
    and auto's choice name the clip's), None before the first frame."""

    def __init__(self, up: Upscaler, info: VideoInfo, opts: VideoOptions) -> None:
        from ..lossy import Compression

        self.up, self.request = up, opts.request
        self.source = Compression(format=info.codec.upper(), lossy=not info.lossless)
        self.last: UpscaleResult | None = None
        self._planned: PlannedUpscale | None = None

    def __call__(self, rgb: np.ndarray) -> np.ndarray:
        from ..io import DecodedImage

        image = DecodedImage(rgb)
        h, w = image.pixels.shape[:2]
        if self._planned is None or self._planned.in_size != (h, w):
            self._planned = self.up.planned(h, w, self.request, source=self.source, img=image)
        self.last = self._planned(image, quantize=True)
        return self.last.image.pixels


def frame_upscaler(up: Upscaler, info: VideoInfo, opts: VideoOptions) -> FrameUpscaler:
    """The clip's :class:`FrameUpscaler`."""
    return FrameUpscaler(up, info, opts)


def _plan_key(info: VideoInfo, opts: VideoOptions, settings: VideoSettings, a: int, b: int,
              size: int) -> dict:
    st, r = info.path.stat(), opts.request
    return {"input": str(info.path.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
            "model": str(r.model), "denoise": r.denoise, "look": r.look, "scale": r.scale,
            "outscale": r.outscale, "width": r.width, "height": r.height, "tta": r.tta,
            "precision": r.precision, "codec": settings.codec, "crf": settings.quality, "frames": [a, b],
            "segment": size}


def prepare_parts(parts: Path, key: dict) -> None:
    """The segment folder for ``key``: kept when it holds this very plan's segments, else emptied."""
    plan_file = parts / "plan.json"
    try:
        same = json.loads(plan_file.read_text()) == key
    except (OSError, ValueError):
        same = False
    if not same:
        shutil.rmtree(parts, ignore_errors=True)
        parts.mkdir(parents=True)
        plan_file.write_text(json.dumps(key))


def check_size(up: Upscaler, info: VideoInfo, opts: VideoOptions) -> None:
    from ..inference import UpscaleError

    try:
        r = opts.request
        (h, w), _ = up.plan_size(info.height, info.width, r.scale, r.outscale, r.width, r.height)
    except UpscaleError as e:
        raise VideoError(str(e)) from None
    if h % 2 or w % 2:
        raise VideoError(f"output size {w}x{h} is odd: 4:2:0 video needs even sizes (choose another "
                         "--width/--height/--outscale)")


@dataclass
class Plan:
    """One video's work: its frames a..b-1 in segments ``spans``, committed as ``paths``."""

    info: VideoInfo
    settings: VideoSettings
    a: int
    b: int
    spans: list[tuple[int, int]]
    paths: list[Path]
    out: Path
    segment: int = seg.SEGMENT_FRAMES  # frames per segment: what a resumed run keeps whole

    @property
    def missing(self) -> list[int]:
        return [i for i, p in enumerate(self.paths) if not p.exists()]

    @property
    def done_frames(self) -> int:
        return sum(b - a for (a, b), p in zip(self.spans, self.paths, strict=True) if p.exists())


def plan_video(up: Upscaler, src: Path, out: Path, opts: VideoOptions, segment_frames: int = 0) -> Plan:
    """Probe ``src`` and prepare its segment folder (kept when an earlier run of the same plan left
    segments there): VideoError for what is wrong with the input, before any frame is upscaled."""
    settings = settings_of(opts)
    info = probe(src)
    a, b = _span(info, settings)
    check_size(up, info, opts)
    size = segment_frames or seg.SEGMENT_FRAMES
    spans = seg.plan(a, b, size)
    parts = parts_folder(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    prepare_parts(parts, _plan_key(info, opts, settings, a, b, size))
    return Plan(info, settings, a, b, spans, [seg.segment_path(parts, i) for i in range(len(spans))], out,
                size)


class VideoInterrupted(KeyboardInterrupt):
    """Ctrl-C during a video; its message says what the next run of the same command keeps."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(interrupted_message(plan))
        self.kept = plan.done_frames


def interrupted(plan: Plan) -> VideoInterrupted:
    """The Ctrl-C report of ``plan``. With no finished segment its folder goes: the plan file alone
    keeps nothing for the next run (which writes it afresh), and "nothing kept" leaves nothing behind."""
    if not plan.done_frames:
        shutil.rmtree(parts_folder(plan.out), ignore_errors=True)
    return VideoInterrupted(plan)


def interrupted_message(plan: Plan) -> str:
    """What an interruption kept: the finished segments (whole ones only)."""
    kept, total, n = plan.done_frames, plan.b - plan.a, len(plan.spans)
    head = f"{plan.info.path}: interrupted: "
    grain = f"a run resumes by whole segments of {plan.segment} frames"
    if not kept:
        unfinished = (f"this video's {total} frames are one segment, unfinished" if n == 1
                      else f"none of this video's {n} segments was finished")
        return f"{head}nothing kept for the next run ({grain}, and {unfinished})"
    done = n - len(plan.missing)
    if done == n:  # stopped while joining
        return (f"{head}all {total} frames kept ({n} segments, in {parts_folder(plan.out)}); "
                "the same command joins them")
    return (f"{head}{kept} of {total} frames kept ({done} of {n} segments, in {parts_folder(plan.out)}); "
            f"the same command resumes from there ({grain}: the one in progress is redone)")


def finish(plan: Plan) -> None:
    """Join the committed segments into the output; the segment folder goes."""
    join(plan.info, plan.paths, [sa for sa, _ in plan.spans], plan.out, plan.a, plan.b)
    shutil.rmtree(parts_folder(plan.out), ignore_errors=True)


def result_of(up: Upscaler, plan: Plan, opts: VideoOptions, seconds: float, choice: object = None,
              model: str = "", kept: int = 0) -> VideoResult:
    """``kept``: the frames an earlier run had committed (``plan.done_frames`` before this run's)."""
    r = opts.request
    (oh, ow), _ = up.plan_size(plan.info.height, plan.info.width, r.scale, r.outscale, r.width, r.height)
    n = plan.b - plan.a
    return VideoResult(frames=n, out_pixels=n * ow * oh, seconds=seconds, model=model or str(r.model),
                       choice=choice.describe() if choice is not None else "",
                       chosen=choice.model if choice is not None else "", kept=kept)


def frame_bar(plan: Plan):  # noqa: ANN201 - a tqdm
    from tqdm import tqdm

    return tqdm(total=plan.b - plan.a, initial=plan.done_frames, unit="frame", desc=plan.info.path.name,
                leave=False, position=1, disable=None, file=sys.stderr, dynamic_ncols=True)


def upscale_video(
    up: Upscaler, src: Path, out: Path, opts: VideoOptions, segment_frames: int = 0
) -> VideoResult:
    """Upscale ``src`` into ``out`` (VideoError for this video's fault; nothing at ``out`` then)."""
    plan = plan_video(up, src, out, opts, segment_frames)
    upscale = frame_upscaler(up, plan.info, opts)
    kept = plan.done_frames
    bar = frame_bar(plan)
    start = time.perf_counter()
    try:
        for i in plan.missing:
            (sa, sb), path = plan.spans[i], plan.paths[i]
            seg.encode_segment(plan.info, sa, sb, upscale, plan.settings, path,
                               on_frame=lambda: bar.update(1))
        finish(plan)
    except KeyboardInterrupt:
        raise interrupted(plan) from None
    finally:
        bar.close()
    result = upscale.last
    return result_of(up, plan, opts, time.perf_counter() - start,
                     choice=result.choice if result is not None else None,
                     model=result.model if result is not None else "", kept=kept)
