"""TrainConfig has no data folders of its own: --train is required (a clear error), --val optional."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from sr.cli import main
from sr.train import TrainConfig
from sr.train.loop import Trainer


@pytest.fixture(autouse=True)
def _argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # sr.cli.main rewrites sys.argv


def test_no_default_points_outside_the_checkout() -> None:
    cfg = TrainConfig()
    assert cfg.train == [] and cfg.val == []
    for f in dataclasses.fields(TrainConfig):
        value = getattr(cfg, f.name)
        assert "shared" not in str(value), f.name


def test_a_missing_train_flag_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError, match="give --train DIR"):
        Trainer(TrainConfig(out=str(tmp_path), device="cpu", threads=1)).fit()
    code = main(["train", "--out", str(tmp_path), "--device", "cpu", "--steps", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "sr train: error: no training data: give --train DIR" in err
    assert not any(tmp_path.iterdir())  # nothing written
