"""The channel kinds, ``channel`` (squeeze-and-excitation gating) and ``channel-sa`` (Restormer's
transposed attention): against naive references written with loops over channels, and what ``sr info``
and ``sr train --attention`` make of them (shapes, bf16, gradients and ONNX, alike for the spatial
kinds: test_attention_channel_spatial.py)."""

from __future__ import annotations

import math

import pytest
import torch

from sr.commands.info import attention_summary
from sr.models import NetConfig, build_model
from sr.models.attention import get_attention, make_attention
from sr.models.registry import ASA
from tests.models.attention_checks import frame, strong_block, trains_through_sr_train

KINDS = ("channel", "channel-sa")


def se_core(w: dict, q, k, v: torch.Tensor) -> torch.Tensor:
    """Squeeze-and-excitation, one channel at a time: mean -> fc1 -> ReLU -> fc2 -> sigmoid -> scale."""
    b, c, h, wd = v.shape
    w1, b1 = w["excite.fc1.weight"][:, :, 0, 0], w["excite.fc1.bias"]
    w2, b2 = w["excite.fc2.weight"][:, :, 0, 0], w["excite.fc2.bias"]
    out = torch.empty_like(v)
    for i in range(b):
        squeeze = [v[i, ch].sum() / (h * wd) for ch in range(c)]
        hidden = [max(float(sum(w1[j, ch] * squeeze[ch] for ch in range(c)) + b1[j]), 0.0)
                  for j in range(w1.shape[0])]
        for ch in range(c):
            logit = float(sum(w2[ch, j] * hidden[j] for j in range(len(hidden))) + b2[ch])
            out[i, ch] = v[i, ch] / (1 + math.exp(-logit))
    return out


def mdta_core(heads: int):
    """Transposed attention, one (head, output channel) at a time: cosine scores between that channel's
    q and every channel's k of the head (over all pixels), times the head's temperature, softmax, mix
    of the head's v channels."""

    def core(w: dict, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, c, _, _ = v.shape
        d = c // heads
        out = torch.empty_like(v)
        for i in range(b):
            for hd in range(heads):
                chans = range(hd * d, (hd + 1) * d)
                qn = [q[i, ch].flatten() / q[i, ch].norm() for ch in chans]
                kn = [k[i, ch].flatten() / k[i, ch].norm() for ch in chans]
                for a in range(d):
                    scores = [float(w["temperature"][hd, 0, 0] * (qn[a] * kn[j]).sum()) for j in range(d)]
                    top = max(scores)
                    e = [math.exp(s - top) for s in scores]
                    out[i, hd * d + a] = sum(e[j] / sum(e) * v[i, hd * d + j] for j in range(d))
        return out

    return core


@pytest.mark.parametrize("reduction", [1, 2, 4])
def test_channel_gate_matches_the_naive_squeeze_and_excitation(reduction):
    block = strong_block("channel", 8, 2, reduction=reduction, all_weights=True)
    x = torch.randn(2, 8, 5, 7, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = block(x)
    torch.testing.assert_close(got, frame(block, x, se_core).float(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("heads", [1, 3])
def test_channel_self_attention_matches_the_naive_transposed_attention(heads):
    block = strong_block("channel-sa", 12, heads, seed=heads, all_weights=True)
    x = torch.randn(2, 12, 6, 5, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = block(x.contiguous(memory_format=torch.channels_last))  # the engine's layout
    torch.testing.assert_close(got, frame(block, x, mdta_core(heads)).float(), atol=1e-5, rtol=0)


def test_channel_self_attention_temperature_sharpens_each_head_alone():
    # a large temperature turns the head's softmax into an argmax over channels: each output channel
    # is then one of v's channels; the other head, at temperature 1, still mixes
    block = make_attention("channel-sa", 8, 2).eval()
    x = torch.randn(1, 8, 6, 6, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        q, k, v = block.project(x)
        block.temperature[0] = 1e4
        out = block.attend(q, k, v, x, None)
    for ch in range(4):
        assert min((out[0, ch] - v[0, j]).abs().max() for j in range(4)) < 1e-5
    assert all((out[0, ch] - v[0, j]).abs().max() > 1e-3 for ch in range(4, 8) for j in range(4, 8))


def test_options_are_stated_in_the_registry_and_checked():
    assert get_attention("channel").defaults == {"reduction": 4, "stride": 1}
    assert get_attention("channel-sa").defaults == {"stride": 1}
    assert all(get_attention(k).k_max() is None for k in KINDS)  # no per-region budget
    with pytest.raises(ValueError, match="reduction must be an integer in"):
        make_attention("channel", 8, 2, reduction=16)
    with pytest.raises(ValueError, match="not divisible by heads"):
        make_attention("channel-sa", 8, 3)


@pytest.mark.parametrize("kind, summary", [("channel", "channel (reduction=4, stride=2)"),
                                           ("channel-sa", "channel-sa (stride=2)")])
def test_sr_info_names_the_kind_and_its_options(kind, summary):
    cfg = NetConfig(attention=kind, attn_options=dict(ASA))
    assert attention_summary(cfg) == summary
    model = build_model("asa-base-x2", attention=kind)
    assert sum(hasattr(m, "attend") for m in model.body) == 2


@pytest.mark.slow
def test_sr_train_attention_channel_sa_trains_and_checkpoints(tmp_path):
    trains_through_sr_train("channel-sa", tmp_path)
