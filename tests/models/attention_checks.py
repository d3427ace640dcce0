"""Checks shared by the attention kinds' tests: a block whose branch shows in its output, the naive
frame around a reference core, a dense reference under a mask, gradients everywhere, bf16 autocast,
ONNX and torch.compile against eager torch, and what `sr train` and `sr info` make of a kind."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sr.cli import build_parser, main
from sr.models import NetConfig, SRNet, build_config, build_model, set_attention_path
from sr.models.attention import attention, make_attention
from sr.models.attention.common import merge_heads, split_heads
from sr.weights import save_weights

# The optional extra (pip install -e ".[onnx]"; CI installs it): without it the ONNX checks skip.
needs_onnx = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("onnx", "onnxscript", "onnxruntime")),
    reason="the onnx extra is not installed",
)


def qkv(c: int, h: int, w: int, seed: int = 0, b: int = 2) -> list[torch.Tensor]:
    """Three seeded (b, c, h, w) maps: q, k and v for a core's ``attend``."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, c, h, w, generator=g) for _ in range(3)]


def strong_block(kind: str, dim: int, heads: int, seed: int = 0, *, all_weights: bool = False,
                 **options) -> nn.Module:
    """``make_attention(kind, ...)`` in eval mode with its output projection redrawn at a scale where the
    branch shows: the default starts near zero and would hide any error of the core. ``all_weights``
    redraws every weight at that scale, not the projection alone."""
    torch.manual_seed(seed)
    block = make_attention(kind, dim, heads, 0, **options).eval()
    with torch.no_grad():
        for p in block.parameters() if all_weights else [block.proj.weight]:
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


def masked_dense(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, blocked: torch.Tensor
) -> torch.Tensor:
    """Softmax attention over every token of (B, C, H, W) q, k, v with an (HW, HW) mask, True = blocked
    (row-major tokens): the textbook matrix, the reference that a sparse kind must equal."""
    b, c, h, w = q.shape
    qt, kt, vt = (split_heads(t.flatten(2).transpose(1, 2), heads) for t in (q, k, v))  # (B, heads, HW, d)
    out, _ = attention(qt, kt, vt, blocked)
    return merge_heads(out).transpose(1, 2).reshape(b, c, h, w)


def gradients_reach_everything(block: nn.Module, x: torch.Tensor) -> None:
    """Train mode, one loss on the output: the input and every parameter get a finite, non-zero gradient."""
    block.train()
    x = x.clone().requires_grad_()
    block(x).square().mean().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().max() > 0, name
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().max() > 0


def bf16_core_follows_reference(block: nn.Module, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                                v: torch.Tensor, want: torch.Tensor) -> None:
    """The block keeps an fp32 input's shape and dtype, and its core on bf16 q, k, v under CPU autocast
    answers in bf16 at q's shape, within bf16's rounding of ``want`` (the fp32 reference on q, k, v)."""
    with torch.no_grad():
        y = block(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = block.attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), q, None)
    assert y.shape == x.shape and y.dtype == torch.float32
    assert low.shape == q.shape and low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), want, atol=0.05, rtol=0.02)


def follows_fp32_under_bf16_autocast(block: nn.Module, x: torch.Tensor) -> None:
    """The whole block under CPU bf16 autocast (training's bf16): its shape, finite, and within bf16's
    rounding of the fp32 output."""
    with torch.no_grad():
        want = block(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = block(x)
    assert got.shape == want.shape and torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), want, atol=0.1, rtol=0.02)


def onnx_matches_torch(block: nn.Module, sizes: list[tuple[int, int]], min_side: int = 1) -> None:
    """Export the block's static path (where it has one) with symbolic height and width (as ``sr export
    --onnx`` does), then onnxruntime on CPU against torch at each (H, W): one graph for every size,
    up to float rounding."""
    import onnxruntime as ort

    set_attention_path(block, "static")
    c = block.dim
    height, width = (torch.export.Dim(n, min=min_side) for n in ("height", "width"))
    with torch.no_grad():
        program = torch.onnx.export(block, (torch.rand(1, c, 19, 23),), None, dynamo=True, opset_version=18,
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
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=f"{h}x{w}")


def compiles_without_graph_breaks(block: nn.Module, sizes: list[tuple[int, int]]) -> None:
    """The static path under ``torch.compile(fullgraph=True, dynamic=True)``: fullgraph fails on any
    graph break (a host read, a data-dependent shape), and symbolic sizes make one trace serve several
    sizes. The eager backend checks the tracing, not code generation, which keeps this quick."""
    torch._dynamo.reset()
    set_attention_path(block, "static")
    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend="eager")
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for h, w in sizes:
            x = torch.randn(1, block.dim, h, w, generator=g)
            torch.testing.assert_close(compiled(x), block(x), atol=1e-5, rtol=1e-5)


def sr_train_builds(kind: str) -> list[nn.Module]:
    """`sr train --attention KIND` on asa-small: the flag as the CLI parses it, the training config it
    makes, the network that config's preset and attention build (the config builder the trainer
    calls), then one training forward and backward; returns the network's attention blocks."""
    from sr.train.config import FIELDS, load_config

    args = build_parser("train").parse_args(["train", "--attention", kind, "--preset", "asa-small",
                                             "--scale", "2", "--amp", "off", "--device", "cpu"])
    cfg = load_config(None, **{name: getattr(args, name) for name in FIELDS})
    assert cfg.attention == kind
    torch.manual_seed(0)
    net = SRNet(build_config(cfg.preset, cfg.scale, attention=cfg.attention)).train()
    hr = torch.rand(2, 3, 24, 24, generator=torch.Generator().manual_seed(0))
    F.l1_loss(net(F.avg_pool2d(hr, 2)), hr).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
    return [m for m in net.body if hasattr(m, "attend")]


def trains_through_sr_train(kind: str, tmp_path: Path) -> None:
    """The whole ``sr train --attention KIND`` run on a preset (whose attn_options the kind partly reads):
    two steps on tiny textures, and the checkpoint is that preset's network with ``kind`` in its
    attention blocks. Slower than :func:`sr_train_builds`, which stops at the first step."""
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


def sr_info_lines(kind: str, options: dict, tmp_path: Path, capsys) -> dict[str, str]:
    """`sr info` of a weights file holding a tiny network of ``kind``: its rows, label -> text."""
    torch.manual_seed(0)
    cfg = NetConfig(scale=2, channels=8, blocks=2, attn_every=1, heads=2, attention=kind,
                    attn_options=options)
    path = save_weights(SRNet(cfg), tmp_path / f"{kind}.safetensors")
    capsys.readouterr()
    assert main(["info", str(path), "--size", "64x48"]) == 0
    rows = [re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in capsys.readouterr().out.splitlines()]
    return {row[0]: row[1] for row in rows if len(row) == 2}
