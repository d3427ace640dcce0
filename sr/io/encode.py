"""Encoding: :class:`DecodedImage` -> PNG (16-bit when the source was), JPEG or WebP bytes or files.

An encode has two steps: :func:`prepare_image` makes the encoder's own copy of the samples (Pillow's
image, or a 16-bit PNG's bytes), and :class:`PreparedImage` encodes that to bytes or straight into a
file. The prepared image holds no reference to the decoded one, so a caller that hands its only
reference over (``prepare_image(take())``) frees the samples before the encoder allocates its buffers:
for a 48 MP JPEG, libjpeg's coefficients for the optimised Huffman tables (274 MiB) then come on top
of Pillow's copy alone, not of the samples too (137 MiB).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image

from .atomic import _TempCreateError, atomic_write
from .decode import quiet_pillow
from .errors import ImageEncodeError, ImageWriteError
from .formats import FORMATS, format_from_path, normalize_format
from .image import DecodedImage, quantize, to_float
from .png16 import PNG_COMPRESS_LEVEL, encode_png16


class PreparedImage:
    """An image ready for one format's encoder (:func:`prepare_image`): Pillow's copy of the samples
    with the encoder's options, or the finished bytes of a 16-bit PNG."""

    def __init__(
        self, fmt: str, pil: Image.Image | None, options: dict[str, object], data: bytes = b""
    ) -> None:
        self.format, self._pil, self._options, self._data = fmt, pil, options, data

    def encode(self) -> bytes:
        """The encoded file's bytes."""
        if self._pil is None:
            return self._data
        buf = io.BytesIO()
        self._save(buf)
        return buf.getvalue()

    def write(self, path: str | Path) -> Path:
        """Encode into ``path`` atomically: a temporary file in the target folder, then a rename. The
        encoder writes into the temporary file as it goes (no copy of the encoded bytes in memory).
        On any failure the target is left as it was and no temporary file remains."""
        path = Path(path)
        if path.is_dir():
            raise ImageWriteError("is a folder", path)
        try:
            atomic_write(path, self._data if self._pil is None else self._save)
        except _TempCreateError as e:
            raise ImageWriteError(f"cannot create a file in {path.parent} ({e.strerror or e})", path) from e
        except OSError as e:
            raise ImageWriteError(f"cannot write the file ({e.strerror or e})", path) from e
        return path

    def _save(self, out: BinaryIO) -> None:
        assert self._pil is not None
        with quiet_pillow():
            try:
                self._pil.save(out, format=FORMATS[self.format].pil_name, **self._options)
            except OSError as e:
                if e.errno is not None:  # the file's own error (a full disk), not the encoder's
                    raise
                raise ImageEncodeError(f"{self.format.upper()} encoder failed ({e})") from e
            except ValueError as e:
                raise ImageEncodeError(f"{self.format.upper()} encoder failed ({e})") from e


def prepare_image(img: DecodedImage, format: str = "png", quality: int = 95) -> PreparedImage:
    """``img`` checked for ``format`` and copied into the encoder's own form (:class:`PreparedImage`).

    PNG is 16-bit when ``img.bit_depth == 16`` (JPEG and WebP are always 8-bit). Alpha is kept in
    PNG and WebP and composited on white for JPEG. Gray stays gray except in WebP (which has no
    gray mode). The ICC profile is written back when its colour space matches the channels.
    """
    fmt = normalize_format(format)
    if isinstance(quality, bool) or not isinstance(quality, (int, np.integer)) or not 1 <= quality <= 100:
        raise ImageEncodeError(f"quality must be an integer from 1 to 100, got {quality!r}")
    limit = FORMATS[fmt].max_side or 2**31 - 1
    if img.width > limit or img.height > limit:
        raise ImageEncodeError(
            f"{img.width}x{img.height} is too large for {fmt.upper()} (at most {limit} per side)"
        )
    icc = _matching_icc(img.icc_profile, img.is_gray)
    colour, alpha = img.pixels, img.alpha
    if fmt == "jpeg" and alpha is not None:
        colour, alpha = to_float(colour), to_float(alpha)
        colour, alpha = colour * alpha[..., None] + (1.0 - alpha[..., None]), None  # composite on white
    planes = colour if alpha is None else np.concatenate([colour, alpha[..., None]], axis=2)
    if fmt == "png" and img.bit_depth == 16:
        return PreparedImage(fmt, None, {}, encode_png16(quantize(planes, np.uint16), icc))
    samples = quantize(planes, np.uint8)
    pil = Image.fromarray(samples[..., 0] if samples.shape[2] == 1 else samples)
    options: dict[str, object] = {"icc_profile": icc} if icc else {}
    if fmt == "jpeg":
        # 4:4:4 chroma at high quality: subsampling would blur the colour detail the upscaler added
        options.update(quality=quality, subsampling=0 if quality >= 90 else 2, optimize=True)
    elif fmt == "webp":
        options.update(quality=quality, method=4)
    else:
        options.update(compress_level=PNG_COMPRESS_LEVEL)
    return PreparedImage(fmt, pil, options)


def encode_image(img: DecodedImage, format: str = "png", quality: int = 95) -> bytes:
    """Encode to PNG, JPEG or WebP bytes (:func:`prepare_image` says how)."""
    return prepare_image(img, format, quality).encode()


def _matching_icc(icc: bytes | None, gray: bool) -> bytes | None:
    """The profile if its colour space (header bytes 16-20) fits the output channels, else None."""
    if not icc or len(icc) < 128:
        return None
    space = icc[16:20]
    return icc if space == (b"GRAY" if gray else b"RGB ") else None


def write_image(path: str | Path, img: DecodedImage, format: str | None = None, quality: int = 95) -> Path:
    """Encode and write ``img`` atomically: a temporary file in the target folder, then a rename.

    The format comes from the suffix when ``format`` is None. On any failure the target is left as it
    was (absent or the previous file) and no temporary file remains.
    """
    path = Path(path)
    fmt = normalize_format(format) if format is not None else format_from_path(path)
    return prepare_image(img, fmt, quality).write(path)
