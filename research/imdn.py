"""IMDN, the published architecture, for timing against ours (``python -m research.peers``); random weights.

Hui, Gao, Yang, Wang, "Lightweight Image Super-Resolution with Information Multi-distillation
Network", ACM MM 2019: a 3x3 feature conv, six information multi-distillation blocks (IMDB) of 64
channels, a 1x1 fusion of all six outputs, a 3x3 conv with a long skip, and a 3x3 conv + pixel
shuffle. 694,404 / 703,059 / 715,176 parameters at x2 / x3 / x4, as published (694K / 703K / 715K).
Written here from the paper's description: what is timed is the published network's compute, not
its trained quality (its released weights are not used or shipped).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ContrastChannelAttention(nn.Module):
    """IMDN's CCA layer: channel weights from each channel's contrast (std + mean over space)."""

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        self.gate = nn.Sequential(
            nn.Conv2d(channels, channels // reduction, 1), nn.ReLU(inplace=True),
            nn.Conv2d(channels // reduction, channels, 1), nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=(2, 3), keepdim=True)                          # (B, C, 1, 1)
        std = (x - mean).pow(2).mean(dim=(2, 3), keepdim=True).sqrt()    # (B, C, 1, 1)
        return x * self.gate(std + mean)


class DistillationBlock(nn.Module):
    """One IMDB: four 3x3 convs; after each of the first three a quarter of the channels is split off
    ("distilled") and the rest refined further; the four distilled parts are fused by CCA + 1x1."""

    def __init__(self, channels: int = 64, distill_rate: float = 0.25) -> None:
        super().__init__()
        self.distilled = int(channels * distill_rate)      # 16 of 64
        self.remaining = channels - self.distilled        # 48
        self.c1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.c2 = nn.Conv2d(self.remaining, channels, 3, padding=1)
        self.c3 = nn.Conv2d(self.remaining, channels, 3, padding=1)
        self.c4 = nn.Conv2d(self.remaining, self.distilled, 3, padding=1)
        self.cca = ContrastChannelAttention(self.distilled * 4)
        self.fuse = nn.Conv2d(self.distilled * 4, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        split = (self.distilled, self.remaining)
        d1, r1 = F.leaky_relu(self.c1(x), 0.05).split(split, dim=1)     # (B, 16, H, W), (B, 48, H, W)
        d2, r2 = F.leaky_relu(self.c2(r1), 0.05).split(split, dim=1)
        d3, r3 = F.leaky_relu(self.c3(r2), 0.05).split(split, dim=1)
        d4 = self.c4(r3)                                                  # (B, 16, H, W)
        return self.fuse(self.cca(torch.cat([d1, d2, d3, d4], dim=1))) + x


class IMDN(nn.Module):
    """IMDN at ``scale``: (B, 3, H, W) in [0, 1] -> (B, 3, scale*H, scale*W)."""

    def __init__(self, scale: int, channels: int = 64, blocks: int = 6) -> None:
        super().__init__()
        self.scale = scale
        self.head = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.ModuleList(DistillationBlock(channels) for _ in range(blocks))
        self.fuse = nn.Sequential(nn.Conv2d(channels * blocks, channels, 1), nn.LeakyReLU(0.05))
        self.body_tail = nn.Conv2d(channels, channels, 3, padding=1)
        self.upsample = nn.Sequential(nn.Conv2d(channels, 3 * scale * scale, 3, padding=1),
                                      nn.PixelShuffle(scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feat = self.head(x)                                      # (B, 64, H, W)
        outs, h = [], feat
        for block in self.blocks:
            h = block(h)
            outs.append(h)
        body = self.body_tail(self.fuse(torch.cat(outs, dim=1))) + feat   # (B, 64, H, W)
        return self.upsample(body)                               # (B, 3, sH, sW)
