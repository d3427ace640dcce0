"""glibc's allocator controls for the service: freed memory handed back to the system.

Both calls are glibc's; where the C library is another (musl, macOS) they do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _load_libc() -> ctypes.CDLL | None:
    """The C library, for glibc's allocator controls; None where it cannot be loaded."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


_LIBC = _load_libc()
# Both are glibc's; None elsewhere (musl, macOS), where the calls below do nothing.
_MALLOC_TRIM = getattr(_LIBC, "malloc_trim", None)
_MALLOPT = getattr(_LIBC, "mallopt", None)
# glibc raises its mmap threshold to the size of each big block freed (up to 32 MiB), so after one
# 19 MB upload body every later one comes from the heap, where freed space fragments instead of
# going back to the system. A fixed threshold (which also stops that adjustment) keeps big buffers
# mmapped, each returned whole when freed.
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h


def fix_mmap_threshold(size: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold at ``size`` bytes for this process; False without glibc."""
    return _MALLOPT is not None and bool(_MALLOPT(_M_MMAP_THRESHOLD, size))


def return_freed_memory() -> None:
    """Hand the allocator's free pages back to the system (a few ms; a no-op without glibc)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
