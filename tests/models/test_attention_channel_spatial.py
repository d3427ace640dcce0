"""What the four channel and spatial kinds (``channel``, ``channel-sa``, ``spatial``, ``cbam``) promise
alike: shapes and dtype at odd sizes and both strides, bf16 (autocast and cast weights) close to fp32,
a gradient for every parameter and the input, and an ONNX graph that matches torch at every size.
Each kind's own reference and options: test_attention_channel.py and test_attention_spatial.py."""

from __future__ import annotations

import pytest
import torch

from sr.models.attention import make_attention
from tests.models.attention_checks import (
    gradients_reach_everything,
    needs_onnx,
    onnx_matches_torch,
    strong_block,
)

KINDS = ("channel", "channel-sa", "spatial", "cbam")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hw", [(1, 1), (5, 3), (17, 23)])
@pytest.mark.parametrize("stride", [1, 2])
def test_shapes_and_dtype_at_odd_sizes(kind, hw, stride):
    block = strong_block(kind, 12, 3, stride=stride, all_weights=True)
    x = torch.randn(2, 12, *hw).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        y = block(x)
    assert y.shape == x.shape and y.dtype == torch.float32 and torch.isfinite(y).all()


@pytest.mark.cpu_bf16
@pytest.mark.parametrize("kind", KINDS)
def test_bf16_autocast_and_bf16_weights_follow_fp32(kind):
    block = strong_block(kind, 12, 3, all_weights=True)
    x = torch.randn(1, 12, 16, 20, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = block(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # training's bf16
            q, k, v = block.project(x)
            core = block.attend(q, k, v, x, None)
            auto = block(x)
        cast = block.to(torch.bfloat16)(x.bfloat16())  # inference's bf16: weights and input cast
    assert core.dtype == torch.bfloat16 and cast.dtype == torch.bfloat16
    scale = ref.abs().max()
    for y in (auto, cast):
        assert torch.isfinite(y).all()
        assert (y.float() - ref).abs().max() < 0.05 * scale


@pytest.mark.parametrize("kind", KINDS)
def test_every_parameter_and_the_input_get_a_gradient(kind):
    gradients_reach_everything(make_attention(kind, 12, 3), torch.randn(2, 12, 7, 9))


@needs_onnx
@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_onnx_export_matches_torch_at_every_size(kind):
    onnx_matches_torch(strong_block(kind, 8, 2, all_weights=True), [(12, 10), (7, 9), (1, 1), (33, 17)])
