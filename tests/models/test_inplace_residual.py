"""Inference adds residuals in place (no third full-size map): the outputs are today's, bit for bit.

With grad enabled the blocks take the out-of-place path (``x + y``) that training needs; under
no_grad / inference_mode they add into the branch's fresh output. IEEE addition commutes, so the
two must agree exactly, in fp32 and bf16, and the network's input must be left untouched. The
fused conv epilogues (``sr.models.fused``, rounding once in bf16) and the fused attention kernel
(``sr.models.attention.native``, which only inference takes) are off here: tests/models/test_fused.py
and tests/models/test_fused_routed.py cover them.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sr.models import fused
from sr.models.attention import AttentionBranch, native, set_attention_path
from sr.models.registry import build_model
from sr.weights import WEIGHTS_DIR, load_model

SHIPPED = [f"{family}-x{s}" for family in ("asa-base", "asa-deep", "photo") for s in (2, 3, 4)]


@pytest.fixture(autouse=True)
def unfused(monkeypatch):
    monkeypatch.setattr(fused, "pointwise_op", lambda: None)
    with native.tiered_only():
        yield


def _both_paths(net: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    keep = x.clone()
    with torch.enable_grad():  # no parameter needs grad, so only the branch taken differs
        reference = net(x)
    with torch.inference_mode():
        fast = net(x)
    assert torch.equal(x, keep), "the input was written to"
    return reference, fast


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("path", ["tiered", "static"])
def test_in_place_residuals_equal_the_out_of_place_ones(dtype, path):
    torch.manual_seed(0)
    net = build_model("asa-base-x2").eval()
    for m in net.modules():  # make the attention's contribution visible
        if isinstance(m, AttentionBranch):
            nn.init.normal_(m.proj.weight, std=0.5)
    net = net.to(dtype=dtype, memory_format=torch.channels_last).requires_grad_(False)
    set_attention_path(net, path)
    x = torch.rand(1, 3, 37, 45).to(dtype).contiguous(memory_format=torch.channels_last)
    reference, fast = _both_paths(net, x)
    assert torch.equal(reference, fast)
    assert fast.is_contiguous(memory_format=torch.channels_last) == reference.is_contiguous(
        memory_format=torch.channels_last)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_models_give_todays_outputs(name):
    if not (WEIGHTS_DIR / f"{name}.safetensors").exists():
        pytest.skip(f"{name} weights not shipped here")
    from skimage import data

    net = load_model(name).net.eval().requires_grad_(False)
    net = net.to(dtype=torch.bfloat16, memory_format=torch.channels_last)
    img = torch.from_numpy(data.astronaut()[100:164, 180:244].copy()).permute(2, 0, 1)[None]
    x = img.float().div(255).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    reference, fast = _both_paths(net, x)
    assert torch.equal(reference, fast)
