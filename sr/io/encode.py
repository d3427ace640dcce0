"""Encoding: :class:`DecodedImage` -> PNG (16-bit when the source was), JPEG or WebP bytes or files."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from .atomic import _TempCreateError, atomic_write
from .decode import quiet_pillow
from .errors import ImageEncodeError, ImageWriteError
from .formats import FORMATS, format_from_path, normalize_format
from .image import DecodedImage, quantize, to_float
from .png16 import PNG_COMPRESS_LEVEL, encode_png16


def encode_image(img: DecodedImage, format: str = "png", quality: int = 95) -> bytes:
    """Encode to PNG, JPEG or WebP bytes.

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
        return encode_png16(quantize(planes, np.uint16), icc)
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
    buf = io.BytesIO()
    with quiet_pillow():
        try:
            pil.save(buf, format=FORMATS[fmt].pil_name, **options)
        except (OSError, ValueError) as e:
            raise ImageEncodeError(f"{fmt.upper()} encoder failed ({e})") from e
    return buf.getvalue()


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
    data = encode_image(img, fmt, quality)
    _atomic_write(path, data)
    return path


def _atomic_write(path: Path, data: bytes) -> None:
    if path.is_dir():
        raise ImageWriteError("is a folder", path)
    try:
        atomic_write(path, data)
    except _TempCreateError as e:
        raise ImageWriteError(f"cannot create a file in {path.parent} ({e.strerror or e})", path) from e
    except OSError as e:
        raise ImageWriteError(f"cannot write the file ({e.strerror or e})", path) from e
