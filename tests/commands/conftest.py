"""Shared by the command tests."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _restore_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # sr.cli.main rewrites sys.argv
