"""The project's MAC count: by hand on small pieces, equal to torch's FLOP counter where that
counter sees every product, and free of the torch._dynamo import that counter costs."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from sr.models import PRESETS, build_model, count_macs
from sr.models.attention import make_attention
from sr.models.macs import count_forward_macs


def test_conv_network_by_hand() -> None:
    model = build_model("conv-base-x2")
    c, blocks, (h, w) = model.cfg.channels, model.cfg.blocks, (10, 14)
    n = h * w  # LR pixels: every conv of this network runs at LR size
    expected = n * 3 * 9 * c  # head
    expected += blocks * 2 * n * c * 9 * c  # two 3x3 convs per residual block
    expected += n * c * 9 * c  # body tail
    expected += n * (3 * 4) * 9 * c  # upsample conv to 3 * s^2 channels
    assert count_macs(model, (2 * h, 2 * w)) == expected


def test_dense_attention_by_hand() -> None:
    c, heads, (h, w) = 24, 3, (6, 5)
    branch = make_attention("dense", c, heads, 0).eval()
    n = h * w
    projections = n * 3 * c * c + n * c * 9 + n * c * c  # qkv, depthwise positional conv, proj
    attention = heads * n * n * 2 * (c // heads)  # scores and weights x values per head
    assert count_forward_macs(branch, torch.zeros(1, c, h, w)) == projections + attention


@pytest.mark.slow
@pytest.mark.parametrize("preset", list(PRESETS))
def test_equals_torch_flop_counter_where_it_sees_every_product(preset: str) -> None:
    # torch's counter has no formula for the fused CPU attention kernel; on the math path the
    # attention is plain matrix products, which it counts: then the two counts must agree exactly.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model = build_model(f"{preset}-x2").eval()
    x = torch.zeros(1, 3, 24, 40)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        model(x)
    assert count_forward_macs(model, x) == counter.get_total_flops() // 2


def test_counting_imports_no_dynamo() -> None:
    code = ("import sys; from sr.models import build_model, count_macs; "
            "count_macs(build_model('asa-base-x2'), (64, 96)); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_training_mode_is_restored() -> None:
    model = build_model("asa-small-x2").train()
    count_macs(model, (32, 32))
    assert model.training
