"""Atomic file writes: the one way sr writes a file (images, weights, checkpoints, caches, reports)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO


class _TempCreateError(OSError):
    """The temporary file could not be created (missing folder, permissions)."""


def atomic_write(path: str | Path, data: bytes | Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` all at once or not at all: the one way sr writes files.

    ``data`` is the bytes, or a function that writes them to the binary file it is given
    (``lambda f: torch.save(obj, f)``). They go to a private temporary name in the target folder,
    are flushed and fsynced, then renamed over ``path``. On any error (or Ctrl-C) the target is
    left as it was and the temporary file is removed; OSErrors propagate.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # O_EXCL: never clobber a stranger's file; mode 0o666 lets the umask set the final permissions
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as e:
        raise _TempCreateError(e.errno, e.strerror, e.filename) from e
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return path


