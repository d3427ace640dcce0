"""What a video file holds, read once before any frame is upscaled: its video stream, every frame's
timestamp (from the packets, without decoding), the first frame's colour and rotation.

Everything wrong with the file that can be known here is a :class:`VideoError` now, before any output
exists: not a video, no video stream, no frames, a codec or pixel layout this path does not take.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from . import VideoError
from .colour import PLANAR_FORMATS, Colour, colour_of

# Codecs that keep every pixel: --model auto gives them the clean-input family (like a PNG).
LOSSLESS_CODECS = frozenset({"ffv1", "png", "qtrle", "huffyuv", "ffvhuff", "utvideo", "rawvideo",
                             "magicyuv", "apng"})


@dataclass(frozen=True)
class VideoInfo:
    path: Path
    codec: str
    width: int
    height: int
    pix_fmt: str
    time_base: Fraction
    pts: tuple[int, ...]  # every frame's presentation time in time_base units, in display order
    rate: Fraction | None  # the stream's nominal rate (the encoder's hint; the timestamps rule)
    colour: Colour
    rotation: float  # degrees, from the display matrix (0 when none)

    @property
    def frames(self) -> int:
        return len(self.pts)

    @property
    def lossless(self) -> bool:
        return self.codec in LOSSLESS_CODECS


def _reason(e: Exception) -> str:
    text = getattr(e, "strerror", None) or str(e)
    return text.split(": '")[0] if text else type(e).__name__


def probe(path: Path) -> VideoInfo:
    """Read ``path``'s video stream (VideoError with the reason when it cannot be upscaled)."""
    import av

    try:
        container = av.open(str(path), metadata_errors="replace")
    except (av.FFmpegError, OSError, UnicodeDecodeError) as e:
        raise VideoError(f"not a readable video ({_reason(e)})") from None
    with container:
        if not container.streams.video:
            raise VideoError("no video stream")
        stream = container.streams.video[0]
        ctx = stream.codec_context
        if ctx is None or ctx.codec is None or not ctx.codec.is_decoder:
            raise VideoError(f"unsupported video codec ({stream.codec_context.name if ctx else 'unknown'})")
        codec = ctx.name
        pts: list[int] = []
        first = None
        try:
            for packet in container.demux(stream):
                if packet.size == 0:
                    continue
                t = packet.pts if packet.pts is not None else packet.dts
                if t is None:
                    raise VideoError("video packets without timestamps")
                pts.append(int(t))
                if first is None:
                    for frame in packet.decode():
                        first = frame
                        break
            if first is None and pts:
                for frame in stream.codec_context.decode(None):  # a decoder that buffers frames
                    first = frame
                    break
        except av.FFmpegError as e:
            raise VideoError(f"corrupt or truncated video ({_reason(e)})") from None
        if not pts or first is None:
            raise VideoError("the video stream has no frames")
        if first.format.name not in PLANAR_FORMATS:
            raise VideoError(f"unsupported pixel format {first.format.name} (8-bit YUV 4:2:0 or 4:4:4 only)")
        if first.width < 2 or first.height < 2:
            raise VideoError(f"frame size {first.width}x{first.height} is too small")
        rate = stream.average_rate or stream.guessed_rate
        return VideoInfo(path=path, codec=codec, width=first.width, height=first.height,
                         pix_fmt=first.format.name, time_base=stream.time_base, pts=tuple(sorted(pts)),
                         rate=Fraction(rate) if rate else None, colour=colour_of(first, first.height),
                         rotation=float(getattr(first, "rotation", 0) or 0))
