"""Fixtures of tests/external: the tiny outside models (tests/external/models.py), saved once per
session, and a private bf16-check cache per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.external.models import ModelFiles, Tiny, save_model, tiny_models


@pytest.fixture(scope="session")
def tiny() -> dict[str, Tiny]:
    """The tiny models by key (skips where spandrel is missing)."""
    return tiny_models()


@pytest.fixture(scope="session")
def model_files(tiny, tmp_path_factory) -> dict[str, ModelFiles]:
    """Every tiny model, saved once for the session under its key."""
    folder = tmp_path_factory.mktemp("outside-models")
    return {key: save_model(t, folder / key, seed=i) for i, (key, t) in enumerate(tiny.items())}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch) -> Path:
    """The bf16 check's answers go to this test's folder, never the user's ~/.cache/sr."""
    cache = tmp_path / "sr-cache"
    monkeypatch.setenv("SR_CACHE_DIR", str(cache))
    return cache
