"""sr.io.atomic: atomic_write (temp file, fsync, rename) and every writer going through it.

Every image is made here (numpy/PIL/tifffile). Any warning that leaks out of sr.io fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sr.io import (
    write_image,
)
from tests.io.images import small_image

pytestmark = pytest.mark.filterwarnings("error")


def test_atomic_write_failure_mid_write_leaves_neither_target_nor_temp(tmp_path):
    from sr.io import atomic_write

    def half(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(tmp_path / "new.bin", half)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old.bin").write_bytes(b"before")

    def interrupted(f):
        f.write(b"x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "old.bin", interrupted)
    assert [p.name for p in tmp_path.iterdir()] == ["old.bin"]
    assert (tmp_path / "old.bin").read_bytes() == b"before"


def test_atomic_write_fsyncs_before_the_rename(tmp_path, monkeypatch):
    from sr.io import atomic_write

    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    atomic_write(tmp_path / "a.bin", b"bytes")
    atomic_write(tmp_path / "b.bin", lambda f: f.write(b"callback"))
    assert calls == ["fsync", "replace"] * 2
    assert (tmp_path / "a.bin").read_bytes() == b"bytes" and (tmp_path / "b.bin").read_bytes() == b"callback"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.bin"]


def test_every_file_writer_goes_through_atomic_write(tmp_path, monkeypatch):
    import torch

    import sr.io
    from sr.data.patches import cached
    from sr.models import NetConfig, SRNet
    from sr.train.checkpoints import atomic_save
    from sr.weights import load_weights, save_weights

    written = []
    real = sr.io.atomic_write

    def spy(path, data):
        written.append(Path(path).name)
        return real(path, data)

    for module in ("sr.io.encode", "sr.weights", "sr.data.patches", "sr.train.checkpoints"):
        monkeypatch.setattr(f"{module}.atomic_write", spy)
    write_image(tmp_path / "img.png", small_image())
    net = SRNet(NetConfig(scale=2, channels=8, blocks=1, attention="none"))
    save_weights(net, tmp_path / "w.safetensors")
    atomic_save({"step": 1}, tmp_path / "ckpt.pt")
    cached(tmp_path, "key", lambda: np.arange(4))
    assert written == ["img.png", "w.safetensors", "ckpt.pt", "key.npy"]
    assert load_weights(tmp_path / "w.safetensors")[0].scale == 2
    assert torch.load(tmp_path / "ckpt.pt") == {"step": 1}
    np.testing.assert_array_equal(cached(tmp_path, "key", lambda: None), np.arange(4))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
