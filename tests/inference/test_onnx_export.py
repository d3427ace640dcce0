"""ONNX export: onnxruntime on CPU against torch on the sample images, metadata, CLI errors, atomic writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from sr.cli import main
from sr.inference import Upscaler, onnx_export
from sr.inference.onnx_export import OnnxNet, OnnxUnavailable, export_onnx
from sr.io import DecodedImage, read_image
from sr.metrics import float_psnr as psnr
from sr.models import build_model, set_attention_path
from sr.weights import load_weights, save_weights

# The optional extra (pip install -e ".[onnx]"; CI installs it): without it only the error paths run.
needs_onnx = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("onnx", "onnxscript", "onnxruntime")),
    reason="the onnx extra is not installed",
)

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "data").glob("*.png"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """The shipped x2 model exported once through the CLI (export dominates this module's time)."""
    out = tmp_path_factory.mktemp("onnx") / "asa-base-x2.onnx"
    assert main(["export", "--onnx", "asa-base-x2", "-o", str(out)]) == 0
    return out


def nchw(path: Path) -> np.ndarray:
    pixels = read_image(path).pixels
    if pixels.shape[2] == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))[None]  # (1, 3, H, W)


@needs_onnx
@pytest.mark.slow
def test_onnxruntime_matches_torch_on_the_sample_images(exported):
    assert len(SAMPLES) >= 5
    ort_net = OnnxNet(exported, threads=2)
    net, _ = load_weights(REPO / "weights" / "asa-base-x2.safetensors")
    set_attention_path(net, "static")
    engine = Upscaler("asa-base-x2", device="cpu", tile=None, threads=2)  # the CPU default: tiered
    for path in SAMPLES:  # odd sizes among them (226x150, 240x161) and one gray image
        x = nchw(path)
        y = ort_net(x)
        assert y.shape == (1, 3, 2 * x.shape[2], 2 * x.shape[3])
        with torch.no_grad():
            ref = net(torch.from_numpy(x)).numpy()
        assert psnr(y, ref) >= 80, path.name  # the same graph: float rounding only
        default = engine.upscale(DecodedImage(x[0].transpose(1, 2, 0).copy())).image.pixels
        # vs `sr upscale`'s default (the tiered path, other float order): docs/inference.md's bar
        assert psnr(y[0].transpose(1, 2, 0), default) >= 50, path.name


@needs_onnx
@pytest.mark.slow
def test_metadata_and_small_inputs(exported):
    ort_net = OnnxNet(exported)
    meta = ort_net.metadata
    assert ort_net.scale == 2 and meta["sr_scale"] == "2"
    assert meta["sr_attention"] == "adaptive" and float(meta["sr_budget"]) == 4.0 and meta["sr_k_max"] == "8"
    assert "asa-base-x2" in meta["sr_model"]
    for hw in [(1, 1), (5, 3), (9, 17)]:  # below the graph's minimum side: padded by OnnxNet, then cropped
        assert ort_net(np.random.rand(1, 3, *hw).astype(np.float32)).shape == (1, 3, 2 * hw[0], 2 * hw[1])


def test_cli_errors_are_messages(tmp_path, capsys):
    assert main(["export", "--onnx", "asa-base-x2", "-o", str(tmp_path / "m.safetensors")]) == 2
    assert ".onnx" in capsys.readouterr().err
    assert main(["export", "--onnx", "no-such-model", "-o", str(tmp_path / "m.onnx")]) == 2
    assert "unknown model" in capsys.readouterr().err
    assert main(["export", "--onnx", "asa-base-x2", "-o", str(tmp_path / "nowhere" / "m.onnx")]) == 2
    assert "not found" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_missing_extra_says_how_to_install(tmp_path, monkeypatch, capsys):
    def missing(module):
        raise OnnxUnavailable(f"{module} is not installed. {onnx_export.EXTRA_HINT}")

    monkeypatch.setattr(onnx_export, "_require", missing)
    assert main(["export", "--onnx", "asa-base-x2", "-o", str(tmp_path / "m.onnx")]) == 2
    assert 'pip install -e ".[onnx]"' in capsys.readouterr().err


@needs_onnx
def test_a_failed_export_leaves_no_file(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        Path(args[2]).write_bytes(b"half a model")  # the exporter had started writing
        raise RuntimeError("exporter failed")

    monkeypatch.setattr(torch.onnx, "export", boom)
    with pytest.raises(RuntimeError, match="exporter failed"):
        export_onnx("asa-base-x2", tmp_path / "m.onnx")
    assert list(tmp_path.iterdir()) == []


@needs_onnx
def test_a_file_that_is_not_an_sr_export_is_refused(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    with pytest.raises(ValueError, match="not a usable ONNX model"):
        OnnxNet(bad)


@needs_onnx
@pytest.mark.slow
def test_own_first_survives_the_export(tmp_path):
    # asa3's own-region-first routing, with perturbed weights so that attention shapes the output
    torch.manual_seed(0)
    net = build_model("asa3-base-x2").eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    weights = save_weights(net, tmp_path / "asa3-x2.safetensors")
    ort_net = OnnxNet(export_onnx(weights, tmp_path / "asa3-x2.onnx"), threads=2)
    x = torch.rand(1, 3, 72, 88)  # not the traced size (64x96), several regions per side
    set_attention_path(net, "static")
    with torch.no_grad():
        ref = net(x).numpy()
        blocks = [m for m in net.modules() if getattr(m, "own_first", False)]
        assert blocks
        for m in blocks:
            m.own_first = False
        other = net(x).numpy()
    y = ort_net(x.numpy())
    assert psnr(y, ref) >= 80  # the exported graph routes like torch
    assert psnr(other, ref) < 60  # and the test would notice a graph that forgot own_first
