"""Fixtures shared by the engine's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def weight_reads(monkeypatch) -> list[str]:
    """The names of the weights files sr.weights reads tensors from during the test, in order: what an
    engine has loaded, seen from outside it."""
    import sr.weights

    reads: list[str] = []
    read = sr.weights.loaded

    def counting(desc, *args, **kwargs):
        reads.append(desc.name)
        return read(desc, *args, **kwargs)

    monkeypatch.setattr(sr.weights, "loaded", counting)
    return reads
