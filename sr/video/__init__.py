"""Video through the upscaler: ``sr upscale clip.mp4 -o out/`` (docs/video.md).

Streamed (decode -> upscale -> encode, no frame folders) through PyAV, built from resumable segments
and joined with the input's audio, subtitles and metadata. PyAV is the ``video`` extra
(``pip install 'sr-asa[video]'``); nothing here imports it until a video is actually opened.
"""

from __future__ import annotations

from pathlib import Path

# Suffixes a folder scan picks up as videos (a file named explicitly is tried by its suffix too).
VIDEO_SUFFIXES = frozenset({".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi"})


class VideoError(ValueError):
    """One video's fault (unreadable, no frames, unsupported): reported with its path, batch goes on."""


def is_video(path: Path | str) -> bool:
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


def check_installed() -> None:
    """A clear line when PyAV is missing (the ``video`` extra)."""
    from ..errors import CLIError

    try:
        import av  # noqa: F401
    except ImportError:
        raise CLIError("video input needs PyAV: pip install 'sr-asa[video]'") from None
