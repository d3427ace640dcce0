"""The output video's encoding: codec, quality, which frames, and the container it goes in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..request import UpscaleRequest

# --video-codec NAME -> (FFmpeg encoder, default CRF). H.264 CRF 18 is the usual "visually lossless";
# x265 and SVT-AV1 reach the same look at higher CRF numbers.
CODECS = {"h264": ("libx264", 18), "h265": ("libx265", 20), "av1": ("libsvtav1", 24),
          "vp9": ("libvpx-vp9", 24)}
DEFAULT_CODEC = "h264"
# Containers written as they came; others (avi, and webm with a codec webm cannot hold) become mkv.
KEPT_CONTAINERS = {".mp4", ".m4v", ".mov", ".mkv"}
WEBM_CODECS = {"vp9", "av1"}


@dataclass(frozen=True)
class VideoSettings:
    codec: str = DEFAULT_CODEC
    crf: int | None = None  # None: the codec's default above
    frames: tuple[int, int | None] | None = None  # --frames A:B, B exclusive (None: to the end)

    @property
    def encoder(self) -> str:
        return CODECS[self.codec][0]

    @property
    def quality(self) -> int:
        return self.crf if self.crf is not None else CODECS[self.codec][1]


class VideoOptions(Protocol):
    """What a video run reads from its caller's options (the batch's ``BatchOptions`` has these):
    the request every frame is upscaled with and the encoding flags. A protocol, so that sr.video
    stands below the batch that drives it."""

    request: UpscaleRequest
    video_codec: str
    crf: int | None
    frames: str | None


def parse_frames(text: str) -> tuple[int, int | None]:
    """``A:B`` (frames A to B-1), ``A:`` or ``:B``; ValueError with the reason."""
    a, sep, b = text.partition(":")
    try:
        start = int(a) if a.strip() else 0
        end = int(b) if b.strip() else None
    except ValueError:
        raise ValueError(f"--frames must be A:B (frame numbers), got {text!r}") from None
    if not sep or start < 0 or (end is not None and end <= start):
        raise ValueError(f"--frames must be A:B with 0 <= A < B, got {text!r}")
    return start, end


def available(codec: str) -> bool:
    """Whether this PyAV build has the encoder behind ``codec``."""
    import av

    try:
        av.codec.Codec(CODECS[codec][0], "w")
    except Exception:  # noqa: BLE001 - UnknownCodecError and friends: simply not there
        return False
    return True


def output_suffix(src: Path, codec: str = DEFAULT_CODEC) -> str:
    suffix = src.suffix.lower()
    if suffix in KEPT_CONTAINERS or (suffix == ".webm" and codec in WEBM_CODECS):
        return suffix
    return ".mkv"
