"""Every shipped model's fast inference path agrees with the fixed-shape reference within 50 dB (Y-PSNR).

The tiered path is the one tuned for CPU speed; the static path (``set_attention_path(net,
'static')``) computes the same hard top-k attention as masked dense blocks, with none of the tiered
path's sorting, gathers or kernels, so it is an independent reference for it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sr.metrics import rgb_to_y
from sr.models import set_attention_path
from sr.weights import load_model, shipped_models

SHIPPED = [p.stem for p in shipped_models()]


def y_psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """Y-PSNR in dB (peak 255) of two (1, 3, H, W) float images in [0, 1], neither rounded to 8 bits
    (``sr.metrics.psnr`` rounds its first argument, which would measure the rounding, ~63 dB)."""
    def y(t: torch.Tensor) -> np.ndarray:
        return rgb_to_y(t[0].float().clamp(0, 1).permute(1, 2, 0).numpy().astype(np.float64) * 255)

    mse = float(np.mean((y(a) - y(b)) ** 2))
    return float("inf") if mse == 0 else 10 * float(np.log10(255.0**2 / mse))


def astronaut_tile(h: int, w: int) -> torch.Tensor:
    from skimage import data

    img = data.astronaut()[96 : 96 + h, 170 : 170 + w]  # face and helmet edge: budgets vary by region
    return torch.from_numpy(img.copy()).permute(2, 0, 1)[None].float().div(255)


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=pytest.mark.cpu_bf16)],
                         ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", SHIPPED)
@torch.inference_mode()
def test_tiered_path_agrees_with_static_reference(name, dtype):
    net = load_model(name).net.eval().to(dtype=dtype, memory_format=torch.channels_last)
    if not set_attention_path(net, "static"):
        pytest.skip(f"{name} has no routed attention")
    x = astronaut_tile(60, 76).to(dtype).contiguous(memory_format=torch.channels_last)
    reference = net(x)
    set_attention_path(net, "tiered")
    fast = net(x)
    assert fast.shape == reference.shape
    assert y_psnr(fast, reference) >= 50.0
