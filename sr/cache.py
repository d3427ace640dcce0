"""Where sr keeps what it works out once per machine, and what a file's entry is keyed on: no torch,
nothing of sr's own, so any layer may ask (the attention kernel's build, sr.external's bf16 checks
and recognised models, sr.weights' blends).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$SR_CACHE_DIR``, else ``~/.cache/sr``: the bf16 checks' answers, the built attention kernel."""
    return Path(os.environ.get("SR_CACHE_DIR") or Path.home() / ".cache" / "sr")


def file_key(path: Path) -> tuple[str, int, int]:
    """A cache key that changes when the file is replaced (provisional weights get overwritten): the
    blend cache's in sr.weights, sr.external's caches of recognised models and file hashes."""
    st = path.stat()
    return str(path.resolve()), st.st_mtime_ns, st.st_size
