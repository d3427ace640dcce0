"""Video through the upscaler: ``sr upscale clip.mp4 -o out/`` (docs/video.md).

Streamed (decode -> upscale -> encode, no frame folders) through PyAV, built from resumable segments
and joined with the input's audio, subtitles and metadata. PyAV is the ``video`` extra
(:data:`INSTALL_HINT`); nothing here imports it until a video is actually opened.
"""

from __future__ import annotations

from pathlib import Path

# Suffixes a folder scan picks up as videos (a file named explicitly is tried by its suffix too).
VIDEO_SUFFIXES = frozenset({".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi"})
# How to get PyAV: sr-asa is not on the public package index, so its extra is installed from a
# checkout (or from the wheel's path, 'sr_asa-....whl[video]'), or PyAV on its own.
INSTALL_HINT = "pip install av (the video extra: pip install '.[video]' in a checkout of sr)"


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
        raise CLIError(f"video input needs PyAV: {INSTALL_HINT}") from None
