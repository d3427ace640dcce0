"""Segments: the video is encoded in pieces of SEGMENT_FRAMES frames, each one a file committed
atomically (written under a temporary name, then renamed). An interrupted run leaves whole segments
only, and the next run encodes just the missing ones; since each segment is encoded alone from the
same frames with the same settings, the joined file is byte-identical either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from . import VideoError
from .colour import to_rgb, to_yuv420
from .probe import VideoInfo
from .settings import VideoSettings

SEGMENT_FRAMES = 120  # 5 s at 24 fps: a crash loses at most this much work
SEGMENT_FORMAT = "mp4"  # keeps the time base given, and the packets' DTS


def plan(first: int, end: int, size: int = 0) -> list[tuple[int, int]]:
    """Frame index ranges [a, b) covering [first, end)."""
    size = size or SEGMENT_FRAMES
    return [(a, min(a + size, end)) for a in range(first, end, size)]


def _short_options(settings: VideoSettings, frames: int) -> dict[str, str]:
    """Encoder options for a segment of ``frames`` frames: x265 with B-frames on a 1- or 2-frame
    segment (a clip's short last one, a short ``--frames``) makes packets the MP4 muxer refuses
    ("not yet implemented"), on some content; such a segment has no B-frames to gain anyway."""
    if settings.encoder == "libx265" and frames < 3:
        return {"x265-params": "bframes=0"}
    return {}


def segment_path(parts: Path, i: int) -> Path:
    return parts / f"seg-{i:05d}.{SEGMENT_FORMAT}"


def frames(info: VideoInfo, a: int, b: int) -> Iterator[tuple[int, np.ndarray]]:
    """(pts, float RGB) of frames a..b-1 in display order, decoded from the keyframe before a."""
    import av

    wanted = info.pts[a:b]
    want = set(wanted)
    last = wanted[-1]
    with av.open(str(info.path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        if a > 0:
            container.seek(wanted[0], stream=stream, backward=True, any_frame=False)
        try:
            for frame in container.decode(stream):
                if frame.pts in want:
                    want.discard(frame.pts)
                    yield frame.pts, to_rgb(frame, info.colour)
                if frame.pts is not None and frame.pts >= last and not want:
                    return
        except av.FFmpegError as e:
            raise VideoError(f"corrupt or truncated video (decoding failed: {e})") from None
    if want:
        raise VideoError(f"corrupt or truncated video ({len(want)} frames could not be decoded)")


def encode_segment(info: VideoInfo, a: int, b: int, upscale: Callable[[np.ndarray], np.ndarray],
                   settings: VideoSettings, dest: Path, on_frame: Callable[[], None] | None = None) -> None:
    """Upscale frames a..b-1 (``upscale``: float RGB -> uint8 RGB) and encode them into ``dest``."""
    import av

    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        with av.open(str(tmp), "w", format=SEGMENT_FORMAT) as out:
            stream = None
            for pts, rgb in frames(info, a, b):
                big = upscale(rgb)
                h, w = big.shape[:2]
                if stream is None:
                    stream = out.add_stream(settings.encoder, rate=info.rate)
                    stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
                    stream.time_base = info.time_base
                    stream.codec_context.time_base = info.time_base
                    ctx = stream.codec_context
                    ctx.colorspace = info.colour.colorspace
                    ctx.color_range = 2 if info.colour.full_range else 1
                    ctx.color_primaries = info.colour.primaries
                    ctx.color_trc = info.colour.trc
                    stream.options = {"crf": str(settings.quality), **_short_options(settings, b - a)}
                frame = av.VideoFrame(w, h, "yuv420p")
                for plane, samples in zip(frame.planes, to_yuv420(big, info.colour), strict=True):
                    view = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
                    view[:, : samples.shape[1]] = samples
                # from 0 in each segment (join adds the start back): MP4 shifts a track that
                # starts later, and a frame's time would come back a few ticks off
                frame.pts, frame.time_base = pts - info.pts[a], info.time_base
                frame.colorspace = info.colour.colorspace
                frame.color_range = 2 if info.colour.full_range else 1
                for packet in stream.encode(frame):
                    out.mux(packet)
                if on_frame is not None:
                    on_frame()
            for packet in stream.encode(None):
                out.mux(packet)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
