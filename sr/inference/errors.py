"""What the engine raises: bad arguments, and work a caller cancelled."""

from __future__ import annotations

from collections.abc import Callable


class UpscaleError(ValueError):
    """Bad arguments: unknown model or device, unavailable scale, bad outscale/size, bad image."""


class UpscaleCancelled(RuntimeError):
    """The caller's ``should_stop`` said stop (client gone, deadline passed): the work was abandoned."""


# Polled before every network forward; True abandons the work (UpscaleCancelled).
StopCheck = Callable[[], bool]
