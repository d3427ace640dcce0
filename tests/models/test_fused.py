"""Fused conv epilogues at CPU inference: the eager ops' outputs (fp32 within float rounding, bf16
within its last bit), the eager ops wherever fusion must not run, and the inputs left as they were.

fp32 is not compared bit for bit: oneDNN picks its convolution kernel per CPU and per call, and the
fused and the plain call may get different ones (on an AMD EPYC the two differ by up to 6e-7 at 32
and 48 channels), so each result is held to what float32 rounding allows of the same sum."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from sr.cpu import cpu_runs_bf16
from sr.models import fused
from sr.models.fused import conv_add, conv_relu
from sr.weights import WEIGHTS_DIR, load_model

SHIPPED = [f"{family}-x{s}" for family in ("asa-base", "asa-deep", "photo", "photo-conv") for s in (2, 3, 4)]
# bf16 convolutions need AVX-512 or AVX-NE-CONVERT: elsewhere those cases skip, saying so (conftest.py)
DTYPES = [torch.float32, pytest.param(torch.bfloat16, marks=pytest.mark.cpu_bf16)]
# fp32, fused vs plain: a few float32 ulps of sums of 9 * C products of O(1) values (seen: 6e-7)
FP32_TOL = dict(rtol=1e-5, atol=1e-5)

needs_op = pytest.mark.skipif(fused.pointwise_op() is None, reason="this PyTorch has no oneDNN fused conv")


def _conv(dtype: torch.dtype, cin: int = 8, cout: int = 8, k: int = 3) -> nn.Conv2d:
    torch.manual_seed(0)
    return nn.Conv2d(cin, cout, k, padding=k // 2).to(dtype=dtype, memory_format=torch.channels_last).eval()


def _map(dtype: torch.dtype, c: int = 8, h: int = 13, w: int = 17) -> torch.Tensor:
    return torch.randn(1, c, h, w).to(dtype).contiguous(memory_format=torch.channels_last)


@pytest.fixture
def unfused(monkeypatch):
    monkeypatch.setattr(fused, "pointwise_op", lambda: None)


@needs_op
@pytest.mark.parametrize("channels", [8, 16, 32, 48])
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_relu_matches_the_eager_ops(dtype, channels):
    conv, x = _conv(dtype, channels, channels), _map(dtype, channels)
    with torch.inference_mode():
        assert fused.fusable(conv, x)
        got, want = conv_relu(conv, x), torch.relu(conv(x))
    assert (got >= 0).all() and (got == 0).any()  # the ReLU ran
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, **FP32_TOL)
    else:  # bf16: one kernel family rounds the fp32 accumulator once, either way
        assert torch.equal(got, want)


@needs_op
@pytest.mark.parametrize("channels", [8, 32, 48])
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_add_rounds_once(dtype, channels):
    conv, x, other = _conv(dtype, channels, channels), _map(dtype, channels), _map(dtype, channels)
    keep = other.clone()
    with torch.inference_mode():
        got = conv_add(conv, x, other)
        # the sum as the fused op forms it: conv accumulated in fp32 (of the same inputs), plus other
        exact = nn.functional.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1)
        exact = exact + other.double()
        eager = conv(x) + other
    assert torch.equal(other, keep), "the residual was written to"
    if dtype == torch.float32:
        torch.testing.assert_close(got, eager, **FP32_TOL)
        torch.testing.assert_close(got.double(), exact, **FP32_TOL)  # the residual was added, once
    else:  # one rounding of that sum (half a bf16 step, 2^-8 relative), where eager rounds twice
        half_step = exact.abs().mul(2.0**-8)
        assert ((got.double() - exact).abs() <= half_step + 1e-4).all()
        assert not torch.equal(got, eager)  # eager rounds the conv first: not what ran here


@pytest.mark.parametrize("dtype", DTYPES)
def test_eager_ops_where_fusion_must_not_run(dtype):
    conv, x, other = _conv(dtype), _map(dtype), _map(dtype)
    assert not fused.fusable(conv, x)  # grad enabled: training keeps the plain ops
    x.requires_grad_(True)
    y = conv_add(conv, conv_relu(conv, x), other)
    y.float().sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    with torch.inference_mode():
        assert not fused.fusable(nn.Conv2d(8, 8, 3, padding=1, groups=2).to(dtype), x.detach())
        assert not fused.fusable(nn.Conv2d(8, 8, 3, padding=1, stride=2).to(dtype), x.detach())
        assert not fused.fusable(_conv(dtype), x.detach().to(torch.float16))
        hooked = _conv(dtype)
        hooked.register_forward_hook(lambda *_: None)  # a MAC counter or profiler watches the module
        assert fused.fusable(_conv(dtype), x.detach()) and not fused.fusable(hooked, x.detach())
        # a residual of another shape (here one that broadcasts) takes the eager add, as before
        narrow = other[:, :1]
        assert torch.equal(conv_add(_conv(dtype), x.detach(), narrow), _conv(dtype)(x.detach()) + narrow)


def test_without_the_op_the_eager_ops_run(unfused):
    conv, x, other = _conv(torch.float32), _map(torch.float32), _map(torch.float32)
    with torch.inference_mode():
        assert not fused.fusable(conv, x)
        assert torch.equal(conv_relu(conv, x), torch.relu(conv(x)))
        assert torch.equal(conv_add(conv, x, other), conv(x) + other)


@needs_op
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_models_fused_against_unfused(name, monkeypatch):
    if not (WEIGHTS_DIR / f"{name}.safetensors").exists():
        pytest.skip(f"{name} weights not shipped here")
    from skimage import data

    img = torch.from_numpy(data.astronaut()[100:164, 180:244].copy()).permute(2, 0, 1)[None].float().div(255)
    for dtype in [torch.float32, *([torch.bfloat16] if cpu_runs_bf16() else [])]:
        net = load_model(name).net.eval().requires_grad_(False)
        net = net.to(dtype=dtype, memory_format=torch.channels_last)
        x = img.to(dtype).contiguous(memory_format=torch.channels_last)
        with torch.inference_mode():
            got = net(x).float().clamp(0, 1)
            with monkeypatch.context() as m:
                m.setattr(fused, "pointwise_op", lambda: None)
                want = net(x).float().clamp(0, 1)
        mse = (got - want).pow(2).mean().item()
        if dtype == torch.float32:  # identical on the AMX Xeon; float rounding elsewhere
            assert (got - want).abs().max().item() <= 1e-5
            assert mse == 0 or 10 * math.log10(1 / mse) > 120
        else:
            assert mse == 0 or 10 * math.log10(1 / mse) > 60  # measured 66-67 dB
