"""sr.weights: saving and checked loading, names turned into files in a weights folder (given, else
the shipped one: the checkout's weights/, else the wheel's sr/_weights), and the errors for each."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import sr.weights
from sr.models import NetConfig, SRNet
from sr.shipped import weights_folder
from sr.weights import (
    FORMAT,
    WeightsError,
    catalog,
    describe,
    find_models,
    load_model,
    load_weights,
    read_metadata,
    resolve_weights,
    save_weights,
    shipped_models,
)

REPO = Path(__file__).resolve().parents[1]


def test_a_checkout_uses_its_weights_folder():
    assert sr.weights.WEIGHTS_DIR == REPO / "weights"
    assert (sr.weights.WEIGHTS_DIR / "asa-base-x2.safetensors").is_file()


def test_an_installed_package_uses_the_copy_inside_it(tmp_path):
    """A package tree with no weights/ beside it (as site-packages is) looks in sr/_weights; the
    build hook in setup.py puts the shipped files there (.ci/wheel-check installs a real wheel)."""
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "sr", site / "sr", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "sr" / "_weights").mkdir()
    shutil.copy2(REPO / "weights" / "asa-base-x2.safetensors", site / "sr" / "_weights")
    code = "import sr.weights as w; print(w.WEIGHTS_DIR); print(w.resolve_weights('asa-base-x2'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    folder, found = out.stdout.split()
    assert Path(folder) == site / "sr" / "_weights"
    assert Path(found) == site / "sr" / "_weights" / "asa-base-x2.safetensors"


def tiny(scale: int = 2, seed: int = 0, channels: int = 8) -> SRNet:
    torch.manual_seed(seed)
    return SRNet(NetConfig(scale=scale, channels=channels, blocks=2, attn_every=2, heads=2, attention="none"))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A weights folder of its own: family 'mine' at x2 and x4, and 'solo-x3'."""
    for scale in (2, 4):
        save_weights(tiny(scale, seed=scale), tmp_path / f"mine-x{scale}.safetensors", steps=100 * scale)
    save_weights(tiny(3), tmp_path / "solo-x3.safetensors")
    return tmp_path


def test_save_then_load_gives_the_same_tensors_and_metadata(tmp_path: Path) -> None:
    net = tiny(3)
    path = save_weights(net, tmp_path / "sub" / "m-x3.safetensors", note="text", steps=42, val={"a": 1.5})
    assert path == tmp_path / "sub" / "m-x3.safetensors" and path.is_file()
    model, meta = load_weights(path)
    assert not model.training and model.scale == 3
    assert model.state_dict().keys() == net.state_dict().keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in net.state_dict().items())
    assert meta["format"] == FORMAT and meta["scale"] == "3"
    assert meta["params"] == str(sum(p.numel() for p in net.parameters()))
    assert json.loads(meta["config"]) == net.cfg.to_dict()
    # str values as given, the rest as JSON
    assert (meta["note"], meta["steps"], json.loads(meta["val"])) == ("text", "42", {"a": 1.5})


def test_weights_folder_is_the_given_one_else_the_default() -> None:
    assert weights_folder() == sr.weights.WEIGHTS_DIR
    assert weights_folder("some/where") == Path("some/where")


def test_resolve_weights_takes_a_path_or_a_name_in_the_weights_folder(folder: Path) -> None:
    assert resolve_weights("solo-x3", folder) == folder / "solo-x3.safetensors"
    assert resolve_weights(str(folder / "mine-x2.safetensors")) == folder / "mine-x2.safetensors"
    assert resolve_weights("asa-base-x2") == sr.weights.WEIGHTS_DIR / "asa-base-x2.safetensors"
    with pytest.raises(WeightsError, match=r"weights file not found: .*gone\.safetensors"):
        resolve_weights(str(folder / "gone.safetensors"), folder)


def test_an_unknown_name_lists_the_models_the_folder_has(folder: Path) -> None:
    with pytest.raises(WeightsError) as e:
        resolve_weights("nope", folder)
    assert str(e.value) == ("unknown model 'nope': not a file and not a shipped model "
                            "(shipped: mine-x2, mine-x4, solo-x3)")
    with pytest.raises(WeightsError, match=r"\(shipped: none\)"):
        resolve_weights("nope", folder / "empty")
    with pytest.raises(WeightsError) as e:
        find_models("nope", folder)
    assert "no nope-x{2,3,4}.safetensors in " + str(folder) in str(e.value)
    assert "(available: mine-x2, mine-x4, solo-x3)" in str(e.value)


def test_shipped_models_and_catalog_list_the_given_folder(folder: Path) -> None:
    names = ["mine-x2", "mine-x4", "solo-x3"]
    assert [p.name for p in shipped_models(folder)] == [f"{n}.safetensors" for n in names]
    (folder / "junk.safetensors").write_bytes(b"not a weights file")
    assert [d.name for d in catalog(folder)] == names  # an unreadable file is not a model
    assert catalog(folder / "missing") == []
    assert "asa-base-x2" in [d.name for d in catalog()]  # default: the shipped weights


def test_describe_reads_metadata_only(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sr.weights, "load_file", None)  # no tensor may be read
    desc = describe(folder / "mine-x4.safetensors")
    assert (desc.name, desc.scale, desc.net) == ("mine-x4", 4, None)
    assert desc.path == folder / "mine-x4.safetensors"
    assert desc.meta["steps"] == "400"


def test_load_model_loads_the_network_of_a_name_in_the_folder(folder: Path) -> None:
    desc = load_model("mine-x4", weights_dir=folder)
    assert desc.name == "mine-x4" and desc.scale == 4 and not desc.net.training
    expected = tiny(4, seed=4).state_dict()
    assert all(torch.equal(desc.net.state_dict()[k], v) for k, v in expected.items())
    with pytest.raises(WeightsError, match="unknown model 'mine-x4'"):
        load_model("mine-x4")  # not in the shipped folder


def test_find_models_gives_a_family_each_scale_or_one_file(folder: Path) -> None:
    name, found = find_models("mine", folder)
    assert name == "mine" and sorted(found) == [2, 4]
    assert [found[s].path.name for s in (2, 4)] == ["mine-x2.safetensors", "mine-x4.safetensors"]
    name, found = find_models("solo-x3", folder)
    assert name == "solo-x3" and list(found) == [3]
    name, found = find_models(folder / "mine-x2.safetensors")
    assert name == "mine-x2" and list(found) == [2]


def test_a_file_named_for_another_scale_than_its_metadata_is_refused(folder: Path) -> None:
    shutil.copy(folder / "mine-x2.safetensors", folder / "odd-x3.safetensors")
    with pytest.raises(WeightsError, match="file name says x3 but its metadata says another scale"):
        find_models("odd", folder)


def test_bad_files_give_one_weights_error_each(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="weights file not found"):
        read_metadata(tmp_path / "none.safetensors")
    (tmp_path / "text.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json")
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        read_metadata(tmp_path / "text.safetensors")
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1)}, str(tmp_path / "plain.safetensors"), metadata={"format": "other"})
    # not sr's own: read through spandrel, which knows no such state dict (or is not installed)
    with pytest.raises(WeightsError, match="not sr's weights \\(no sr-weights metadata\\); "):
        describe(tmp_path / "plain.safetensors")
    path = save_weights(tiny(2), tmp_path / "m-x2.safetensors")
    meta = read_metadata(path)
    wider = json.dumps({**json.loads(meta["config"]), "channels": 16})
    state = {k: v.contiguous() for k, v in tiny(2).state_dict().items()}
    save_file(state, str(tmp_path / "lie.safetensors"), metadata={**meta, "config": wider})
    with pytest.raises(WeightsError, match="weights do not match the declared architecture"):
        load_weights(tmp_path / "lie.safetensors")
    save_file(state, str(tmp_path / "x5.safetensors"), metadata={**meta, "config": json.dumps(
        {**json.loads(meta["config"]), "scale": 5})})
    with pytest.raises(WeightsError, match="unsupported scale 5"):
        describe(tmp_path / "x5.safetensors")
