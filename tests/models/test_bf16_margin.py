"""A bf16 CPU forward widens the map to a multiple of 16 with a zero margin that every conv output
keeps zero (oneDNN's bf16 convs are slow at many other widths): the same outputs as at the real
width, budget maps of the real size, and only where it applies."""

from __future__ import annotations

import math

import pytest
import torch

from sr.models import build_model, network
from sr.weights import WEIGHTS_DIR, load_model

pytestmark = pytest.mark.cpu_bf16  # every test here runs bf16 convolutions on the CPU


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = (a.float().clamp(0, 1) - b.float().clamp(0, 1)).pow(2).mean().item()
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


def head_sizes(*nets: torch.nn.Module) -> list[tuple[int, int]]:
    """(height, width) of the map each forward of ``nets`` gives its first conv, in call order: the
    real size, or the widened one where a margin applies."""
    seen: list[tuple[int, int]] = []
    for net in nets:
        net.head.register_forward_pre_hook(lambda module, args: seen.append(tuple(args[0].shape[-2:])))
    return seen


def _picture(h: int, w: int, dtype: torch.dtype, channels_last: bool = True) -> torch.Tensor:
    from skimage import data

    x = torch.from_numpy(data.astronaut()[:h, :w].copy()).permute(2, 0, 1)[None].float().div(255).to(dtype)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x.contiguous()


@pytest.mark.parametrize("name", ["asa-base-x2", "photo-x4"])
@pytest.mark.parametrize("channels_last", [True, False])
def test_margin_gives_the_real_width_outputs(name, channels_last, monkeypatch):
    if not (WEIGHTS_DIR / f"{name}.safetensors").exists():
        pytest.skip(f"{name} weights not shipped here")
    net = load_model(name).net.eval().to(dtype=torch.bfloat16)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    x = _picture(37, 83, torch.bfloat16, channels_last)
    keep = x.clone()
    sizes = head_sizes(net)
    with torch.inference_mode():
        aux: dict = {}
        got = net(x, aux)
        monkeypatch.setattr(network, "BF16_CPU_ALIGN", 1)  # no margin: the real width
        want_aux: dict = {}
        want = net(x, want_aux)
    assert sizes == [(37, 96), (37, 83)]  # widened to 96 columns, then the real width
    assert torch.equal(x, keep)
    assert got.shape == want.shape == (1, 3, 37 * net.scale, 83 * net.scale)
    assert _psnr(got, want) > 60  # measured: identical (oneDNN sums each output pixel alike)
    assert [m.shape for m in aux["budget_maps"]] == [m.shape for m in want_aux["budget_maps"]]
    assert [m.shape[-2:] for m in aux["budget_maps"]] == [(37, 83)] * len(aux["budget_maps"])


def test_margin_only_where_it_applies():
    torch.manual_seed(0)
    net = build_model("asa-base-x2").eval()
    eca = build_model("asa-base-x2", channel_attention="eca").eval().to(torch.bfloat16)
    sizes = head_sizes(net, eca)
    with torch.inference_mode():
        net(_picture(20, 35, torch.float32))  # fp32: no margin
    net.to(torch.bfloat16)
    with torch.inference_mode():
        net(_picture(20, 32, torch.bfloat16))  # already a multiple of 16
        eca(_picture(20, 35, torch.bfloat16))  # channel attention's means would see the margin
    net(_picture(20, 35, torch.bfloat16))  # autograd: training keeps the real width
    assert sizes == [(20, 35), (20, 32), (20, 35), (20, 35)]
    with torch.inference_mode():
        net(_picture(20, 35, torch.bfloat16))
    assert sizes[4:] == [(20, 48)]
