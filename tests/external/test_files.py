"""sr.external.files: a model file's tensors, read without running anything in it. No spandrel needed.

The refused-pickle tests hold files whose unpickling would write a file (through ``os.system``,
``exec`` or ``open``); each payload is first shown to work (an unrestricted load in a child process
writes its own target), then sr refuses the same kind of file with a one-line reason and its target
is never written.
"""

from __future__ import annotations

import builtins
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from sr.external.files import ModelFileError, read_state_dict


def state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"conv_first.weight": torch.randn(8, 3, 3, 3, generator=g),
            "conv_first.bias": torch.randn(8, generator=g),
            "body.0.alpha": torch.randn(1, 8, 1, 1, generator=g)}


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert torch.equal(got[k], v), k


def refusal(path: Path) -> str:
    with pytest.raises(ModelFileError) as e:
        read_state_dict(path)
    message = str(e.value)
    assert "\n" not in message and str(path) in message
    return message


# -- what is read ------------------------------------------------------------------------------
def test_safetensors_and_pth_give_the_same_tensors(tmp_path):
    want = state()
    save_file(want, str(tmp_path / "m.safetensors"))
    torch.save(want, tmp_path / "m.pth")
    torch.save(want, tmp_path / "m.pt")
    for name in ("m.safetensors", "m.pth", "m.pt"):
        assert_same(read_state_dict(tmp_path / name), want)


@pytest.mark.parametrize("wrapper", ["params_ema", "params", "state_dict", "model", "net_g"])
def test_training_wrappers_are_unwrapped(tmp_path, wrapper):
    want = state(1)
    other = {k: v + 1 for k, v in want.items()}
    # BasicSR saves params and params_ema together: params_ema (the averaged weights) is the model
    saved = {wrapper: want, "params": other, "iter": 5000, "optimizer": {"lr": 0.1}} \
        if wrapper == "params_ema" else {wrapper: want, "epoch": 3}
    torch.save(saved, tmp_path / "m.ckpt")
    assert_same(read_state_dict(tmp_path / "m.ckpt"), want)


def test_a_lightning_checkpoint_with_nested_wrappers(tmp_path):
    want = state(2)
    torch.save({"state_dict": {"generator": want}, "global_step": 10}, tmp_path / "m.ckpt")
    assert_same(read_state_dict(tmp_path / "m.ckpt"), want)


def test_tensors_beside_plain_values_are_kept(tmp_path):
    want = state(3)
    torch.save({**want, "note": "trained on DIV2K", "scale": 4}, tmp_path / "m.pth")
    assert_same(read_state_dict(tmp_path / "m.pth"), want)


# -- what is refused, in one line --------------------------------------------------------------
def test_a_missing_file(tmp_path):
    assert refusal(tmp_path / "nope.pth") == f"model file not found: {tmp_path / 'nope.pth'}"


def test_a_suffix_sr_does_not_read(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"\x08\x07")
    assert "not a model file sr reads (it reads" in refusal(tmp_path / "m.onnx")


def test_corrupt_files(tmp_path):
    (tmp_path / "bad.pth").write_bytes(b"PK\x03\x04 not really a zip" * 4)
    assert "not a readable PyTorch file" in refusal(tmp_path / "bad.pth")
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 64)
    assert "not a readable safetensors file" in refusal(tmp_path / "bad.safetensors")
    good = tmp_path / "cut.pth"
    torch.save(state(), good)
    good.write_bytes(good.read_bytes()[:200])  # a truncated download
    assert "not a readable PyTorch file" in refusal(good)


@pytest.mark.parametrize("content", [[1, 2, 3], {"epoch": 3, "lr": 0.1}, {}, {"params_ema": {}}])
def test_a_pickle_without_tensors(tmp_path, content):
    torch.save(content, tmp_path / "m.pth")
    assert "holds no state dict (no tensors at the top or under params_ema" in refusal(tmp_path / "m.pth")


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


@pytest.mark.filterwarnings("ignore:`torch.jit.:FutureWarning")
@pytest.mark.parametrize("suffix", [".pth", ".pt", ".ckpt"])
def test_torchscript_is_refused_before_anything_is_loaded(tmp_path, suffix, monkeypatch):
    path = tmp_path / f"scripted{suffix}"
    torch.jit.save(torch.jit.script(Tiny()), str(path))
    assert torch.jit.load(str(path)) is not None  # a real TorchScript archive

    def no_load(*args, **kwargs):
        raise AssertionError("a TorchScript file was loaded")

    monkeypatch.setattr(torch, "load", no_load)
    monkeypatch.setattr(torch.jit, "load", no_load)
    message = refusal(path)
    assert message == (f"{path}: a TorchScript file, which runs its own code when loaded: refused (export "
                       "the model's state dict as .safetensors or .pth)")


def test_a_plain_torch_save_zip_is_not_taken_for_torchscript(tmp_path):
    torch.save(Tiny().state_dict(), tmp_path / "m.pth")
    assert zipfile.is_zipfile(tmp_path / "m.pth")
    assert sorted(read_state_dict(tmp_path / "m.pth")) == ["conv.bias", "conv.weight"]


# -- pickles that would run code ---------------------------------------------------------------
class Payload:
    """Unpickled, calls ``func(*args)``: what a malicious checkpoint does."""

    def __init__(self, func, args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def payload(kind: str, target: Path) -> Payload:
    if kind == "os.system":
        return Payload(os.system, (f"echo pwned > '{target}'",))
    if kind == "exec":
        return Payload(builtins.exec, (f"open({str(target)!r}, 'w').write('pwned')",))
    return Payload(builtins.open, (str(target), "w"))  # opening for writing creates the file


def write_evil(path: Path, kind: str, target: Path, container: str) -> Path:
    if container == "pickle":  # a bare pickle (protocol 2, as old checkpoints are), named .pth
        path.write_bytes(pickle.dumps({"params_ema": {"w": payload(kind, target)}}, protocol=2))
    else:  # torch.save's zip archive, the payload in its data.pkl beside a real tensor
        torch.save({"conv.weight": torch.zeros(2, 2), "extra": payload(kind, target)}, path)
    return path


KINDS = ["os.system", "exec", "open"]
REFUSED_GLOBAL = {"os.system": "posix.system" if os.name == "posix" else "nt.system", "exec": "exec",
                  "open": "io.open"}
CONTAINERS = ["pickle", "torch"]
# One child process loads every control file with plain pickle / torch.load(weights_only=False).
LOAD_UNRESTRICTED = """
import pickle, sys, torch
for container, path in zip(sys.argv[1::2], sys.argv[2::2]):
    if container == "pickle":
        pickle.load(open(path, "rb"))
    else:
        torch.load(path, weights_only=False)
"""


@pytest.fixture(scope="module")
def payloads_work(tmp_path_factory) -> None:
    """Each payload runs when loaded unrestricted: its control file writes its own target."""
    folder = tmp_path_factory.mktemp("controls")
    args, targets = [], []
    for kind in KINDS:
        for container in CONTAINERS:
            target = folder / f"written-{kind}-{container}"
            args += [container, str(write_evil(folder / f"{kind}-{container}.pth", kind, target, container))]
            targets.append(target)
    proc = subprocess.run([sys.executable, "-c", LOAD_UNRESTRICTED, *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    missing = [t.name for t in targets if not t.exists()]
    assert missing == [], "a payload does not run: its test proves nothing"


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("suffix", [".pth", ".ckpt"])
def test_a_pickle_that_would_write_a_file_is_refused_and_writes_nothing(tmp_path, container, kind, suffix,
                                                                       payloads_work):
    target = tmp_path / "written"
    evil = write_evil(tmp_path / f"evil{suffix}", kind, target, container)
    message = refusal(evil)
    assert message.startswith(f"{evil}: refused: the file asks to run code while loading, and only tensors "
                              "and plain containers are loaded (")
    assert f"GLOBAL {REFUSED_GLOBAL[kind]} " in message  # what was refused, named
    assert "\x1b" not in message and "add_safe_globals" not in message  # no colour codes, no "allow it"
    assert not target.exists()
