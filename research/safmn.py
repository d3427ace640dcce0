"""Light SAFMN++ (x4), the published network, to compare with on real input (``python -m research.peers``).

Sun, Pan, Tang et al., SAFMN (ICCV 2023: "Spatially-Adaptive Feature Modulation for Efficient Image
Super-Resolution") and its ++ variant, the winner of the AIS 2024 real-time SR challenge's fidelity
track (x4 SR of AVIF-compressed frames). Written here from the paper's description; the released
weights (``../shared/peers/light_safmnpp.pth``, 66,176 parameters, Apache-2.0) load into it strictly.

The light network: a 3x3 conv to ``dim`` features; ``blocks`` blocks, each a simplified
spatially-adaptive feature modulation (SAFM) followed by a convolutional channel mixer (CCM); one
long skip over the blocks; a 3x3 conv to 3 * 16 channels and a pixel shuffle. No biases anywhere.

- SAFM (simplified): a 3x3 conv, then half of its channels is max-pooled to 1/8 of the size, put
  through a depthwise 3x3 conv, upsampled back (bilinear) and, after GELU, used as a multiplicative
  modulation of that half; the two halves are concatenated, GELU, 1x1 conv.
- CCM: 3x3 conv to ``ffn_scale * dim`` channels, GELU, 1x1 conv back. Neither sub-block has its own
  skip in this variant: the only skip is the long one.

Input and output are RGB in [0, 1] (the output is not clamped; the evaluation clamps it).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# The modulation works at 1/POOL of the feature map's size.
POOL = 8


class SimplifiedSAFM(nn.Module):
    """Half the channels modulated by a coarse (1/8 scale) map of themselves; key names as released."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.half = dim // 2
        self.proj = nn.Conv2d(dim, dim, 3, padding=1, bias=False)
        self.dwconv = nn.Conv2d(self.half, self.half, 3, padding=1, groups=self.half, bias=False)
        self.out = nn.Conv2d(dim, dim, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        modulated, kept = self.proj(x).split([self.half, x.shape[1] - self.half], dim=1)
        # below 8 pixels a side the paper's pooled size would be 0; 1 keeps tiny inputs running
        coarse = F.adaptive_max_pool2d(modulated, (max(1, h // POOL), max(1, w // POOL)))
        coarse = F.interpolate(self.dwconv(coarse), size=(h, w), mode="bilinear", align_corners=False)
        mixed = torch.cat([kept, F.gelu(coarse) * modulated], dim=1)
        return self.out(F.gelu(mixed))


class ChannelMixer(nn.Module):
    """CCM: a 3x3 expansion, GELU, a 1x1 projection (``conv.0`` / ``conv.2`` in the released keys)."""

    def __init__(self, dim: int, ffn_scale: float) -> None:
        super().__init__()
        hidden = int(dim * ffn_scale)
        self.conv = nn.Sequential(nn.Conv2d(dim, hidden, 3, padding=1, bias=False), nn.GELU(),
                                  nn.Conv2d(hidden, dim, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class SAFMBlock(nn.Module):
    def __init__(self, dim: int, ffn_scale: float) -> None:
        super().__init__()
        self.conv1 = SimplifiedSAFM(dim)
        self.conv2 = ChannelMixer(dim, ffn_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


class LightSAFMNPP(nn.Module):
    """Light SAFMN++: (B, 3, H, W) in [0, 1] -> (B, 3, 4H, 4W). Defaults: the released x4 model."""

    def __init__(self, dim: int = 32, blocks: int = 2, ffn_scale: float = 1.5, scale: int = 4) -> None:
        super().__init__()
        self.scale = scale
        self.to_feat = nn.Conv2d(3, dim, 3, padding=1, bias=False)
        self.feats = nn.Sequential(*(SAFMBlock(dim, ffn_scale) for _ in range(blocks)))
        self.to_img = nn.Sequential(nn.Conv2d(dim, 3 * scale * scale, 3, padding=1, bias=False),
                                    nn.PixelShuffle(scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feat = self.to_feat(x)                     # (B, dim, H, W)
        return self.to_img(self.feats(feat) + feat)  # (B, 3, sH, sW)


def load_light_safmnpp(path: str | Path) -> LightSAFMNPP:
    """The released light SAFMN++ in eval mode; every key and shape must match (``strict``), else
    RuntimeError. The file keeps its weights under ``params`` (and an EMA copy, ``params_ema``,
    which the released inference script does not use)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "params" in state:
        state = state["params"]
    net = LightSAFMNPP()
    net.load_state_dict(state, strict=True)
    return net.eval()
