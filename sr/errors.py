"""Errors shared across sr's layers, in a module that imports nothing of sr's own: commands and
benches raise :class:`CLIError` without importing :mod:`sr.cli`, the dispatcher that imports them."""

from __future__ import annotations


class CLIError(Exception):
    """An expected failure with a message for the user (exit code 2 unless given)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code
