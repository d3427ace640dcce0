"""sr.train.export: a checkpoint's EMA weights and the run's metadata, as a library call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sr.models import build_config
from sr.train.export import ExportError, export_checkpoint, recipe_metadata
from sr.weights import describe, load_model


def _checkpoint(tmp_path: Path, **extra) -> Path:
    from sr.models import SRNet

    torch.manual_seed(0)
    net = SRNet(build_config("asa-small", 2))
    cfg = {"name": "run", "preset": "asa-small", "scale": 2, "attention": None, "train": ["data"],
           "batch": 4, "patch": 16, "loss": "l1", "rescale": [0.5], "rgb_perm": 0.0}
    ckpt = {"config": cfg, "ema": net.state_dict(), "step": 7, "elapsed": 30.0, "hardware": "NVIDIA H200 x1",
            "best": {"step": 7, "results": {"Set5": {"psnr": 30.0, "ssim": 0.9}}}, **extra}
    path = tmp_path / "best.pt"
    torch.save(ckpt, path)
    return path


def test_export_checkpoint_writes_the_runs_metadata(tmp_path: Path) -> None:
    done = export_checkpoint(_checkpoint(tmp_path), tmp_path / "w.safetensors")
    assert done.step == 7 and done.validation == {"Set5": {"psnr": 30.0, "ssim": 0.9}}
    desc = describe(done.path)
    assert (desc.preset, desc.scale, desc.steps, desc.train_data) == ("asa-small", 2, 7, json.dumps(["data"]))
    assert desc.meta["hardware"] == "NVIDIA H200 x1" and desc.meta["rescale"] == "0.5"
    assert desc.validation["Set5"]["psnr"] == 30.0
    assert load_model(done.path).net is not None


def test_export_errors(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="checkpoint not found"):
        export_checkpoint(tmp_path / "missing.pt", tmp_path / "w.safetensors")
    with pytest.raises(ExportError, match="must end in .safetensors"):
        export_checkpoint(_checkpoint(tmp_path), tmp_path / "w.bin")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ExportError, match="not a usable training checkpoint"):
        export_checkpoint(tmp_path / "junk.pt", tmp_path / "w.safetensors")


def test_recipe_metadata() -> None:
    assert recipe_metadata({}, {}) == {"loss": "l1"}
    lineage = {"from": "asa-base-x2.safetensors", "steps": 12}
    assert recipe_metadata({"loss": "mse", "rgb_perm": 0.25}, lineage) == {
        "loss": "mse", "rgb_perm": "0.25", "init": "asa-base-x2.safetensors (step 12)"}


def test_recipe_metadata_names_the_degradation_and_its_ranges() -> None:
    from sr.data.degrade import TRAINING_CONFIGS

    meta = recipe_metadata({"degrade": "photo"}, {})
    assert meta["degrade"] == "photo"
    assert json.loads(meta["degrade_config"]) == json.loads(json.dumps(TRAINING_CONFIGS["photo"].to_dict()))
    assert "degrade" not in recipe_metadata({"degrade": ""}, {})


def test_an_attention_override_exports_as_the_preset_it_is_and_marks_experimental(tmp_path: Path) -> None:
    from sr.models import SRNet

    net = SRNet(build_config("asa-base", 2, attention="none"))
    cfg = {"name": "arm-conv-x2", "preset": "asa-base", "scale": 2, "attention": "none", "train": ["data"],
           "batch": 4, "patch": 16, "loss": "l1"}
    path = tmp_path / "last.pt"
    torch.save({"config": cfg, "ema": net.state_dict(), "step": 3, "elapsed": 1.0}, path)
    done = export_checkpoint(path, tmp_path / "photo-conv-x2.safetensors", experimental="paired arm")
    desc = describe(done.path)
    assert (desc.preset, desc.attention) == ("conv-base", "none")
    assert desc.meta["experimental"] == "paired arm"
    plain = describe(export_checkpoint(_checkpoint(tmp_path), tmp_path / "w.safetensors").path)
    assert "experimental" not in plain.meta
