"""The scored model: weights checked against the scale, the attention budget set through the
network's own setter, errors as EvaluationError (the command turns them into one line)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sr.descriptor import ModelDescriptor
from sr.evaluation import EvaluationError, load_model, set_budget
from sr.models import build_model
from sr.weights import save_weights


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("w") / "tiny-x2.safetensors"
    torch.manual_seed(0)
    return save_weights(build_model("asa-small-x2"), path, name="tiny-x2", steps="7")


def test_load_model_upscales_and_describes(weights: Path) -> None:
    upscale, desc = load_model(str(weights), 2, torch.device("cpu"), budget=2)
    assert desc.startswith("tiny-x2 (") and "attention budget 2" in desc
    lr = np.random.default_rng(0).integers(0, 256, (8, 12, 3), dtype=np.uint8)
    assert upscale(lr).shape == (16, 24, 3)


def test_load_model_refuses_another_scale(weights: Path) -> None:
    with pytest.raises(EvaluationError, match="is a x2 model but --scale is 3"):
        load_model(str(weights), 3, torch.device("cpu"))


def test_load_model_missing_weights_is_an_evaluation_error(tmp_path: Path) -> None:
    with pytest.raises(EvaluationError, match="--model bicubic"):
        load_model(str(tmp_path / "none.safetensors"), 2, torch.device("cpu"))


def test_set_budget_reaches_every_adaptive_block_through_the_network() -> None:
    model = ModelDescriptor.from_net(build_model("asa-small-x2"))
    blocks = model.net.adaptive_blocks()
    assert blocks and model.k_max is not None
    set_budget(model, 1.5)
    assert [b.budget for b in blocks] == [1.5] * len(blocks)
    set_budget(model, 0)
    assert [b.budget for b in blocks] == [0.0] * len(blocks)


def test_set_budget_bounds_and_kinds() -> None:
    model = ModelDescriptor.from_net(build_model("asa-small-x2"))
    with pytest.raises(EvaluationError, match="k_max"):
        set_budget(model, model.k_max + 1)
    with pytest.raises(EvaluationError, match="k_max"):
        set_budget(model, -1)
    dense = ModelDescriptor.from_net(build_model("asa-small-x2", attention="window"))
    with pytest.raises(EvaluationError, match="needs a model with adaptive attention"):
        set_budget(dense, 1)
