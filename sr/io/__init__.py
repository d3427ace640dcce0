"""Image I/O: decode common formats into float arrays, encode them back, write files atomically.

:func:`read_image` turns a file, bytes or binary stream into a :class:`DecodedImage`: float32 colour in
[0, 1] (one channel for gray sources, three for colour), alpha split off, EXIF orientation applied, the
ICC profile kept, 16-bit sources kept at full precision. Anything it cannot take (empty, truncated,
corrupt, not an image, animated, too many pixels, a format the caller does not accept) raises one
:class:`ImageError` subclass with a clear message. :func:`encode_image` / :func:`write_image` go the
other way: PNG (16-bit when the source was), JPEG or WebP, alpha recombined, ICC profile written
back, files replaced atomically.

:data:`FORMATS` is the one table of image formats (suffixes, Pillow names, MIME types, readable or
writable) that the CLI, evaluation, training and the service read; :func:`atomic_write` is the one way
sr writes a file (images, weights, checkpoints, caches, exports, reports).

One module per job: :mod:`.formats` (the table), :mod:`.errors`, :mod:`.image` (the decoded image and
its samples), :mod:`.guards` (decode-cost limits on the raw bytes), :mod:`.decode`, :mod:`.encode`,
:mod:`.atomic` and :mod:`.png16` (Pillow cannot write 16-bit colour PNG). What is listed in
``__all__`` is the public surface; names with a leading underscore stay inside the package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .atomic import atomic_write
    from .decode import read_array, read_image, read_size
    from .encode import encode_image, write_image
    from .errors import (
        AnimatedImageError,
        DecodeLimitError,
        ImageDecodeError,
        ImageEncodeError,
        ImageError,
        ImageTooLargeError,
        ImageWriteError,
        UnsupportedFormatError,
        UnsupportedModeError,
    )
    from .formats import (
        FORMATS,
        ImageFormat,
        format_for,
        format_from_path,
        listed_suffixes,
        looks_like_image,
        normalize_format,
        output_choices,
        output_formats,
        read_formats,
        read_suffixes,
        signatures,
        sniff,
        suffix_for,
        upload_formats,
        writable_format_for,
    )
    from .guards import (
        DEFAULT_MAX_PIXELS,
        MAX_JPEG_SCANS,
        MAX_PNG_CHUNK,
        MAX_PNG_CHUNKS,
        MAX_PNG_METADATA,
        check_decode_cost,
    )
    from .image import SAMPLE_TYPES, DecodedImage, quantize, to_float
    from .png16 import PNG_COMPRESS_LEVEL, encode_png16

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "FORMATS",
    "MAX_JPEG_SCANS",
    "MAX_PNG_CHUNK",
    "MAX_PNG_CHUNKS",
    "MAX_PNG_METADATA",
    "PNG_COMPRESS_LEVEL",
    "SAMPLE_TYPES",
    "AnimatedImageError",
    "DecodeLimitError",
    "DecodedImage",
    "ImageDecodeError",
    "ImageEncodeError",
    "ImageError",
    "ImageFormat",
    "ImageTooLargeError",
    "ImageWriteError",
    "UnsupportedFormatError",
    "UnsupportedModeError",
    "atomic_write",
    "check_decode_cost",
    "encode_image",
    "encode_png16",
    "format_for",
    "format_from_path",
    "listed_suffixes",
    "normalize_format",
    "output_choices",
    "output_formats",
    "quantize",
    "read_array",
    "read_formats",
    "read_image",
    "read_size",
    "read_suffixes",
    "looks_like_image",
    "signatures",
    "sniff",
    "suffix_for",
    "to_float",
    "upload_formats",
    "writable_format_for",
    "write_image",
]

# Public name -> the submodule that defines it. The submodules load on first use (PEP 562): the CLI
# imports sr.io.formats to list its -f choices, and importing all of sr.io there (numpy, Pillow's
# codecs) made every argument error ~0.5 s slower, for nothing.
_HOME = {
    "AnimatedImageError": "errors",
    "DEFAULT_MAX_PIXELS": "guards",
    "DecodeLimitError": "errors",
    "DecodedImage": "image",
    "FORMATS": "formats",
    "ImageDecodeError": "errors",
    "ImageEncodeError": "errors",
    "ImageError": "errors",
    "ImageFormat": "formats",
    "ImageTooLargeError": "errors",
    "ImageWriteError": "errors",
    "MAX_JPEG_SCANS": "guards",
    "MAX_PNG_CHUNK": "guards",
    "MAX_PNG_CHUNKS": "guards",
    "MAX_PNG_METADATA": "guards",
    "PNG_COMPRESS_LEVEL": "png16",
    "SAMPLE_TYPES": "image",
    "UnsupportedFormatError": "errors",
    "UnsupportedModeError": "errors",
    "atomic_write": "atomic",
    "check_decode_cost": "guards",
    "encode_image": "encode",
    "encode_png16": "png16",
    "format_for": "formats",
    "format_from_path": "formats",
    "listed_suffixes": "formats",
    "normalize_format": "formats",
    "output_choices": "formats",
    "output_formats": "formats",
    "quantize": "image",
    "read_array": "decode",
    "read_formats": "formats",
    "read_image": "decode",
    "read_size": "decode",
    "read_suffixes": "formats",
    "signatures": "formats",
    "sniff": "formats",
    "upload_formats": "formats",
    "looks_like_image": "formats",
    "suffix_for": "formats",
    "to_float": "image",
    "writable_format_for": "formats",
    "write_image": "encode",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
