"""The SR network: residual conv blocks with a few attention blocks, pixel-shuffle upsampler.

x (B, 3, H, W) in [0, 1]
  -> head conv -> [ResBlock x n, attention after every ``attn_every``-th block] -> conv, + long skip
  -> conv to 3*s^2 channels, + the input repeated s^2 times (an image-level skip that costs nothing:
     the network only learns the residual over nearest-neighbour upsampling) -> pixel shuffle
  -> (B, 3, sH, sW)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from .attention import AdaptiveSparseAttention, make_attention
from .blocks import ResBlock
from .fused import conv_add


@dataclass(frozen=True)
class NetConfig:
    scale: int = 2
    channels: int = 48
    blocks: int = 8
    attention: str = "adaptive"
    attn_every: int = 4
    heads: int = 3
    channel_attention: str | None = None
    attn_options: dict = field(default_factory=dict)  # region, window, k, k_min, k_max, budget

    def to_dict(self) -> dict:
        return asdict(self)


class SRNet(nn.Module):
    def __init__(self, cfg: NetConfig) -> None:
        super().__init__()
        if cfg.scale not in (2, 3, 4):
            raise ValueError(f"scale must be 2, 3 or 4, got {cfg.scale}")
        self.cfg = cfg
        c = cfg.channels
        self.head = nn.Conv2d(3, c, 3, padding=1)
        layers: list[nn.Module] = []
        n_attn = 0
        for i in range(cfg.blocks):
            layers.append(ResBlock(c, cfg.channel_attention))
            if cfg.attention != "none" and (i + 1) % cfg.attn_every == 0:
                layers.append(make_attention(cfg.attention, c, cfg.heads, n_attn, **cfg.attn_options))
                n_attn += 1
        self.body = nn.ModuleList(layers)
        self.body_tail = nn.Conv2d(c, c, 3, padding=1)
        self.upsample = nn.Conv2d(c, 3 * cfg.scale**2, 3, padding=1)
        self.shuffle = nn.PixelShuffle(cfg.scale)

    @property
    def scale(self) -> int:
        return self.cfg.scale

    def adaptive_blocks(self) -> list[AdaptiveSparseAttention]:
        """The adaptive attention blocks, in order (none for other attention kinds)."""
        return [m for m in self.body if isinstance(m, AdaptiveSparseAttention)]

    def set_attention_budget(self, budget: float) -> int:
        """Retarget every adaptive attention block's mean budget (key regions per query region;
        0 = attention skipped everywhere); the number of blocks retargeted, 0 when there are none."""
        blocks = self.adaptive_blocks()
        for block in blocks:
            block.set_budget(budget)
        return len(blocks)

    def forward(self, x: torch.Tensor, aux: dict | None = None) -> torch.Tensor:
        """x: (B, 3, H, W) -> (B, 3, sH, sW). Pass a dict as ``aux`` to collect budget maps/loss."""
        feat = self.head(x)  # (B, C, H, W)
        y = feat
        for layer in self.body:
            y = layer(y, aux) if hasattr(layer, "attend") else layer(y)
        y = conv_add(self.body_tail, y, feat)  # body_tail(y) + feat
        anchor = x.repeat_interleave(self.scale**2, dim=1)  # (B, 3*s^2, H, W)
        return self.shuffle(conv_add(self.upsample, y, anchor))  # (B, 3, sH, sW)
