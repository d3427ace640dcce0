"""sr.batch.heap: the heap's free pages go back after big outputs only."""

from __future__ import annotations

import platform

from sr.batch.heap import TRIM_PIXELS, release_free_heap


def test_only_a_big_output_gives_the_heap_back():
    assert release_free_heap(TRIM_PIXELS - 1) is False
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert release_free_heap(TRIM_PIXELS) is glibc
