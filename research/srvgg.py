"""Real-ESRGAN general-x4v3 (SRVGGNetCompact), the published network, to compare with on real input.

Wang, Xie, Dong, Shan, "Real-ESRGAN: Training Real-World Blind Super-Resolution with Pure Synthetic
Data", ICCV workshops 2021; the "general v3" model is its compact VGG-style network: a 3x3 conv to
64 features and PReLU, 32 more 3x3 conv + PReLU pairs, a 3x3 conv to 3 * 16 channels and a pixel
shuffle, plus the nearest-neighbour x4 upsampling of the input (the network learns the residual).
All convs have biases; PReLU has one slope per channel. 1,213,296 parameters. Written here from
that description; the weights in ``../shared/peers/`` (converted from the released fp16 ncnn files,
BSD-3-Clause) load into it strictly under the keys ``body.N.weight`` / ``body.N.bias``.

The model is **GAN-trained** (second-order synthetic degradations, L1 + perceptual + GAN losses):
it trades PSNR for crispness, so its PSNR/SSIM are not a fidelity model's. Its weak-denoise twin
(``-wdn-``) has the same architecture; Real-ESRGAN's inference blends the two by interpolating their
weights, ``strength * general + (1 - strength) * wdn``, with strength 0.5 by default
(:func:`blend_states`).

Input and output are RGB in [0, 1] (the output is not clamped; the evaluation clamps it).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


class SRVGGNetCompact(nn.Module):
    """(B, 3, H, W) in [0, 1] -> (B, 3, sH, sW). Defaults: general-x4v3."""

    def __init__(self, features: int = 64, convs: int = 32, scale: int = 4) -> None:
        super().__init__()
        self.scale = scale
        layers: list[nn.Module] = [nn.Conv2d(3, features, 3, padding=1), nn.PReLU(features)]
        for _ in range(convs):
            layers += [nn.Conv2d(features, features, 3, padding=1), nn.PReLU(features)]
        layers.append(nn.Conv2d(features, 3 * scale * scale, 3, padding=1))
        # one flat Sequential: the released keys number the layers body.0 ... body.66
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = F.pixel_shuffle(self.body(x), self.scale)          # (B, 3, sH, sW)
        return residual + F.interpolate(x, scale_factor=self.scale, mode="nearest")


def read_state(path: str | Path) -> dict[str, torch.Tensor]:
    """A Real-ESRGAN checkpoint's state dict (bare, or under ``params_ema`` / ``params`` as the
    project's own releases store it)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("params_ema", "params"):
        if isinstance(state, dict) and key in state:
            return state[key]
    return state


def blend_states(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor],
                 strength: float) -> dict[str, torch.Tensor]:
    """``strength * a + (1 - strength) * b``, key by key (Real-ESRGAN's denoise-strength control)."""
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        raise ValueError("the two state dicts do not have the same keys and shapes")
    return {k: strength * a[k] + (1 - strength) * b[k] for k in a}


def load_srvgg(state: dict[str, torch.Tensor] | str | Path) -> SRVGGNetCompact:
    """general-x4v3 in eval mode from a file or a state dict; every key and shape must match
    (``strict``), else RuntimeError."""
    if not isinstance(state, dict):
        state = read_state(state)
    net = SRVGGNetCompact()
    net.load_state_dict(state, strict=True)
    return net.eval()
