"""Images as integer samples at their own bit depth: how pixels travel between the batch's stages.

A :class:`~sr.io.DecodedImage` holds float32 (4 bytes a sample); its file had 8 or 16 bits, and the
writer quantises to 8 or 16 bits again. Between stages (the local writer queue, Ray's object store)
an image therefore travels as uint8/uint16: a quarter or half the bytes, and no information lost on
either side, because both conversions are the ones :mod:`sr.io` makes:

- an input's floats are its file's integers divided by 255 or 65535 (``sr.io.decode``), so
  rounding them back gives those integers, and dividing again gives the same floats bit for bit;
- an output's integers are what ``sr.io.encode_image`` would quantise to (JPEG's compositing of
  alpha on white done first, as it does), and dividing them by the same maximum makes the encoder
  quantise to the same integers again: the same file, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..io import DecodedImage, quantize, to_float


@dataclass(eq=False)  # array field: == would be ambiguous
class Samples:
    planes: np.ndarray  # uint8 or uint16 (H, W, C [+ 1 alpha plane])
    has_alpha: bool
    bit_depth: int
    icc_profile: bytes | None = None
    format: str | None = None
    mode: str | None = None

    @property
    def nbytes(self) -> int:
        return int(self.planes.nbytes)


def pack(img: DecodedImage, flatten_alpha: bool = False) -> Samples:
    """``img`` as integers at its bit depth (the engine's samples pass as they are). ``flatten_alpha``:
    composite alpha on white first, as the JPEG encoder does (for an output written as JPEG)."""
    colour, alpha = img.pixels, img.alpha
    if flatten_alpha and alpha is not None:
        colour, alpha = to_float(colour), to_float(alpha)
        colour, alpha = colour * alpha[..., None] + (1.0 - alpha[..., None]), None
    planes = colour if alpha is None else np.concatenate([colour, alpha[..., None]], axis=2)
    ints = quantize(planes, np.uint16 if img.bit_depth == 16 else np.uint8)
    return Samples(ints, alpha is not None, img.bit_depth, img.icc_profile, img.format, img.mode)


def unpack(s: Samples) -> DecodedImage:
    """The image again: without alpha its integer samples as they are (the encoder takes them, and a
    big output stays a quarter of float32's size); with alpha the floats, divided as ``sr.io`` does."""
    if not s.has_alpha:
        return DecodedImage(s.planes, None, s.bit_depth, s.icc_profile, s.format, s.mode)
    values = to_float(s.planes)
    return DecodedImage(values[..., :-1], values[..., -1], s.bit_depth, s.icc_profile, s.format, s.mode)
