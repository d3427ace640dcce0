"""Small helpers that the benchmarks (``sr bench``) and the research scripts share: comma-separated
choices, atomic JSON reports and the torch thread count. Both live in the checkout, not in the wheel,
so the helpers live here rather than in the sr package."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from sr.errors import CLIError
from sr.io import atomic_write

__all__ = ["comma_choices", "set_threads", "write_json"]


def comma_choices(text: str, choices: tuple[str, ...] | list[str], what: str) -> list[str]:
    """'a, b' -> ['a', 'b'], each one of ``choices``; a CLIError naming the bad ones otherwise."""
    picked = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in picked if t not in choices]
    if unknown or not picked:
        names = ", ".join(unknown) or "(none)"
        raise CLIError(f"unknown {what} {names}; choose from {', '.join(choices)}")
    return picked


def write_json(path: str, payload: dict) -> None:
    """Write JSON atomically: a temporary file in the same folder, then a rename (never half-written)."""
    target = Path(path)
    if target.is_dir():
        raise CLIError(f"--json {path}: is a folder")
    if not target.parent.exists():
        raise CLIError(f"--json {path}: folder {target.parent} does not exist")
    try:
        atomic_write(target, (json.dumps(payload, indent=2) + "\n").encode())
    except OSError as e:
        raise CLIError(f"--json {path}: {e.strerror or e}") from None


def set_threads(threads: int) -> None:
    """``--threads N``: torch's CPU threads (0: torch's own choice)."""
    if threads < 0:
        raise CLIError(f"--threads must be >= 0, got {threads}")
    if threads:
        torch.set_num_threads(threads)
