"""``--weights-dir DIR``: the one definition ``sr upscale``, ``sr info``, ``sr eval`` and ``sr serve``
share: the folder model names are looked up in, else ``SR_WEIGHTS_DIR``, else the shipped weights."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import CLIError

WEIGHTS_DIR_ENV = "SR_WEIGHTS_DIR"
WEIGHTS_DIR_HELP = f"folder of <model>-x<scale>.safetensors [{WEIGHTS_DIR_ENV}]"


def env_weights_dir() -> str | None:
    """``SR_WEIGHTS_DIR`` as the service reads it: a blank value is unset, blanks around it dropped."""
    return os.environ.get(WEIGHTS_DIR_ENV, "").strip() or None


def add_weights_dir_argument(p: argparse.ArgumentParser, from_env: bool = True) -> None:
    """Add ``--weights-dir``, defaulting to ``SR_WEIGHTS_DIR`` (``from_env=False``: to None, for
    ``sr serve``, whose settings read the variable themselves)."""
    p.add_argument("--weights-dir", default=env_weights_dir() if from_env else None, help=WEIGHTS_DIR_HELP)


def checked_weights_dir(weights_dir: str | Path | None) -> Path | None:
    """``--weights-dir`` as a path (None: the shipped weights); a folder that is not there is a
    CLIError, before any model is looked up in it."""
    if weights_dir is None:
        return None
    folder = Path(weights_dir).expanduser()
    if not folder.is_dir():
        raise CLIError(f"weights folder not found: {folder}")
    return folder
