"""Checks shared by the tests of the channel and spatial attention kinds: a block whose branch shows in
its output, the naive frame around a reference core, ONNX against torch, one training step."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sr.models import build_model
from sr.models.attention import make_attention

# The optional extra (pip install -e ".[onnx]"; CI installs it): without it the ONNX checks skip.
needs_onnx = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("onnx", "onnxscript", "onnxruntime")),
    reason="the onnx extra is not installed",
)


def strong_block(kind: str, dim: int, heads: int, seed: int = 0, **options) -> nn.Module:
    """``make_attention(kind, ...)`` in eval mode with every weight redrawn at a scale where the
    branch matters: the default output projection starts near zero and would hide the core."""
    torch.manual_seed(seed)
    block = make_attention(kind, dim, heads, 0, **options).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(std=0.5)
    return block


def frame(block: nn.Module, x: torch.Tensor, core) -> torch.Tensor:
    """The family's frame written out in float64, ``x + proj(core(w, q, k, v) + lepe(v))``, around
    ``core``, a reference core given the block's float64 weights ``w`` (its state dict). q, k, v are
    the input projection's thirds; the gating kinds project v alone, and q and k are None. Stride 1."""
    c = x.shape[1]
    w = {k: t.double() for k, t in block.state_dict().items()}
    x = x.double()
    qkv = torch.einsum("oi,bihw->bohw", w["qkv.weight"][:, :, 0, 0], x) + w["qkv.bias"][:, None, None]
    q, k, v = qkv.chunk(3, dim=1) if qkv.shape[1] == 3 * c else (None, None, qkv)
    lepe = F.conv2d(v, w["lepe.weight"], w["lepe.bias"], padding=1, groups=c)
    out = core(w, q, k, v) + lepe
    proj = torch.einsum("oi,bihw->bohw", w["proj.weight"][:, :, 0, 0], out) + w["proj.bias"][:, None, None]
    return x + proj


def all_parameters_learn(block: nn.Module, x: torch.Tensor) -> None:
    """Train mode, one loss on the output: every parameter and the input get a finite, non-zero gradient."""
    block.train()
    x = x.clone().requires_grad_()
    block(x).square().mean().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().max() > 0, name
    assert x.grad is not None and x.grad.abs().max() > 0


def onnx_matches_torch(block: nn.Module, sizes: list[tuple[int, int]]) -> None:
    """Export with symbolic height and width (as ``sr export --onnx`` does), then onnxruntime on CPU
    against torch at each (H, W): one graph for every size, the same numbers up to float rounding."""
    import onnxruntime as ort

    c = block.dim
    height, width = torch.export.Dim("height", min=1), torch.export.Dim("width", min=1)
    with torch.no_grad():
        program = torch.onnx.export(block, (torch.rand(1, c, 12, 10),), None, dynamo=True, opset_version=18,
                                    dynamic_shapes={"x": {2: height, 3: width}}, verbose=False)
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    g = torch.Generator().manual_seed(1)
    for h, w in sizes:
        x = torch.randn(1, c, h, w, generator=g)
        got = session.run(None, {name: x.numpy()})[0]
        with torch.no_grad():
            want = block(x).numpy()
        assert got.shape == want.shape == (1, c, h, w)
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def trains_through_sr_train(kind: str, tmp_path: Path) -> None:
    """``sr train --attention KIND`` on a preset (whose attn_options the kind partly reads): two steps on
    tiny textures, and the checkpoint is that preset's network with ``kind`` in its attention blocks."""
    from sr.cli import main
    from tests.train.runs import textures

    data = textures(tmp_path / "train", n=2, size=40)
    rc = main(["train", "--preset", "asa-small", "--scale", "2", "--attention", kind, "--train", str(data),
               "--steps", "2", "--patch", "16", "--batch", "2", "--name", "t", "--threads", "1",
               "--out", str(tmp_path / "runs"), "--cache", str(tmp_path / "cache"), "--device", "cpu",
               "--amp", "off"])
    assert rc == 0
    run = tmp_path / "runs" / "t"
    assert json.loads((run / "config.json").read_text())["attention"] == kind
    ckpt = torch.load(run / "last.pt", map_location="cpu", weights_only=True)
    assert ckpt["step"] == 2
    net = build_model("asa-small-x2", attention=kind)
    net.load_state_dict(ckpt["model"])  # strict: exactly this network's tensors
    blocks = [m for m in net.body if hasattr(m, "attend")]
    assert len(blocks) == 2 and all(type(b) is type(make_attention(kind, 40, 2)) for b in blocks)
    assert all(b.stride == 2 for b in blocks)  # the preset's stride reaches the kind
