"""sr.io.errors: the typed error hierarchy callers catch.

Every image is made here (numpy/PIL/tifffile). Any warning that leaks out of sr.io fails the test.
"""

from __future__ import annotations

import pytest

from sr.io import (
    AnimatedImageError,
    ImageDecodeError,
    ImageEncodeError,
    ImageError,
    ImageTooLargeError,
    ImageWriteError,
)

pytestmark = pytest.mark.filterwarnings("error")


def test_error_hierarchy():
    for cls in (ImageDecodeError, AnimatedImageError, ImageTooLargeError, ImageEncodeError, ImageWriteError):
        assert issubclass(cls, ImageError) and issubclass(cls, ValueError)
    e = ImageDecodeError("broken", "a/b.png")
    assert (e.reason, e.path, str(e)) == ("broken", "a/b.png", "a/b.png: broken")
    assert str(ImageDecodeError("broken")) == "broken"
