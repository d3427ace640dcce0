"""The typed errors of image reading and writing: one :class:`ImageError` family, user-facing messages."""

from __future__ import annotations

import os


class ImageError(ValueError):
    """An image that cannot be read or written; ``str(e)`` is a message for the user."""

    def __init__(self, reason: str, path: str | os.PathLike | None = None) -> None:
        self.reason = reason
        self.path = None if path is None else os.fspath(path)
        super().__init__(f"{self.path}: {reason}" if self.path else reason)


class ImageDecodeError(ImageError):
    """Zero bytes, truncated, corrupt, not an image, or an unsupported format or pixel mode."""


class UnsupportedModeError(ImageDecodeError):
    """A well-formed image in a pixel mode we do not convert (float, LAB, ...); ``mode`` names it."""

    def __init__(self, mode: str, path: str | os.PathLike | None = None) -> None:
        self.mode = mode
        super().__init__(f"unsupported pixel mode {mode}", path)


class UnsupportedFormatError(ImageDecodeError):
    """A file of a format sr.io reads, from a caller that does not accept it (the service takes no
    PNM); ``format`` is its Pillow name."""

    def __init__(self, reason: str, path: str | os.PathLike | None = None, format: str | None = None) -> None:
        self.format = format
        super().__init__(reason, path)


class AnimatedImageError(ImageError):
    """More than one frame (animated GIF/WebP/APNG, multi-page TIFF)."""


class ImageTooLargeError(ImageError):
    """More pixels than allowed (decompression-bomb protection)."""


class DecodeLimitError(ImageError):
    """A well-formed but hostile structure: more JPEG scans or PNG metadata than any real image has,
    refused before decoding because decoding it would take unbounded time."""


class ImageEncodeError(ImageError):
    """Unknown output format, bad quality, or an image the output format cannot hold."""


class ImageWriteError(ImageError):
    """The output file could not be written (missing folder, permissions, disk full)."""

