"""The engine kinds Upscaler(...) chooses from: one table, in order, that a plugin extends with one call."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from sr.inference import (
    ENGINE_KINDS,
    AutoEngine,
    EngineKind,
    FamilyEngine,
    UpscaleError,
    Upscaler,
    add_engine_kind,
)
from sr.inference.engine import engine_class
from sr.io import DecodedImage


def test_the_table_lists_auto_then_the_family_engine_for_every_other_model(tiny_x2):
    listed = [(k.name, k.engine) for k in ENGINE_KINDS]
    assert listed == [("auto", AutoEngine), ("family", FamilyEngine)]
    assert engine_class("auto") is AutoEngine
    for model in ("asa-base", "asa-base-x2", tiny_x2, str(tiny_x2)):
        assert engine_class(model) is FamilyEngine
    up = Upscaler(tiny_x2, device="cpu", threads=1)
    assert type(up) is FamilyEngine and isinstance(up, Upscaler)
    assert type(Upscaler(model=str(tiny_x2), device="cpu", threads=1)) is FamilyEngine  # by keyword too


@pytest.fixture
def table() -> Iterator[list[EngineKind]]:
    """The table as it is, restored after the test."""
    listed = list(ENGINE_KINDS)
    yield ENGINE_KINDS
    ENGINE_KINDS[:] = listed


def test_a_plugin_adds_a_kind_with_one_call_and_upscaler_builds_it(table, tiny_x2):
    built = []

    class Recorded(FamilyEngine):
        """A family engine that notes each model it is built for."""

        def __init__(self, model, *args, **kwargs):
            super().__init__(model, *args, **kwargs)
            built.append(str(model))

    add_engine_kind(EngineKind("recorded", lambda model: str(model).endswith("tiny-x2.safetensors"),
                               Recorded))
    assert [k.name for k in table] == ["recorded", "auto", "family"]  # a plugin's kind is asked first
    up = Upscaler(tiny_x2, device="cpu", tile=None, threads=1)
    assert type(up) is Recorded and built == [str(tiny_x2)]
    res = up.upscale(DecodedImage(np.full((8, 6, 3), 0.5, np.float32)))
    assert res.image.pixels.shape == (16, 12, 3) and res.model == "tiny-x2"
    assert engine_class("auto") is AutoEngine  # models it does not serve go on down the table


def test_a_kind_must_be_new_and_build_an_upscaler(table):
    with pytest.raises(ValueError, match="'family' is already listed"):
        add_engine_kind(EngineKind("family", lambda model: True, FamilyEngine))
    with pytest.raises(ValueError, match="is not an Upscaler subclass"):
        add_engine_kind(EngineKind("mine", lambda model: True, dict))  # type: ignore[arg-type]
    assert [k.name for k in table] == ["auto", "family"]


def test_a_model_no_listed_kind_serves_is_refused_clearly(table, tiny_x2):
    table.clear()
    with pytest.raises(UpscaleError, match="no engine kind serves model 'auto'"):
        Upscaler("auto")
