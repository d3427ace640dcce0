"""Giving the C heap's free pages back to the system after a big upscale (glibc's ``malloc_trim``).

When an upscale ends, its tiles' activations are freed, but glibc keeps much of that memory in its
heap for reuse: measured ~130 MB after a 2000x1500 photo's pass in 384 px bf16 tiles. The writer's
encode of a big output then allocates its own buffers (for a 48 MP JPEG, Pillow's copy of the image,
183 MB, and libjpeg's coefficients for the optimised Huffman tables, 274 MB) on top of it, and the
job's peak RSS carries both. Trimming costs milliseconds; it is done only after big outputs, since a
small image's next upscale would fault the same pages in again for nothing.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

# Outputs of at least this many pixels give their heap back (x2 of a 2000x1500 photo is 12 MP).
TRIM_PIXELS = 4_000_000


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows)."""
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError, TypeError):
        return None


def release_free_heap(pixels: int) -> bool:
    """After an output of ``pixels``: give the heap's free pages back when the output is big and the C
    library can; whether it did."""
    trim = _malloc_trim() if pixels >= TRIM_PIXELS else None
    if trim is None:
        return False
    trim(0)
    return True
