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
import torch.nn.functional as F
from torch import nn

from .attention import AdaptiveSparseAttention, make_attention
from .blocks import ResBlock
from .fused import add_in_place_ok, clear_margin, conv_add, valid_extent

# oneDNN's bf16 convs on CPU run 1.2-4x slower per column at many widths that are not a multiple of
# 16 (docs/inference.md, "Widths oneDNN's bf16 convolutions dislike"), so a bf16 CPU forward runs its
# convs on a map widened to a multiple of this with a zero margin on the right, kept zero after every
# conv: each conv then sees exactly the zero padding it would at the real width.
BF16_CPU_ALIGN = 16


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

    def _margin(self, x: torch.Tensor) -> tuple[int, int]:
        """(rows, columns) of zero margin for an aligned bf16 CPU forward; (0, 0) where none applies
        (other devices and dtypes, training, tracing, export, compiling, channel attention, whose
        means the margin would change, and widths already aligned). Heights showed no such effect."""
        if (x.device.type != "cpu" or x.dtype != torch.bfloat16 or torch.compiler.is_compiling()
                or not add_in_place_ok() or self.cfg.channel_attention not in (None, "none")):
            return 0, 0
        return 0, -x.shape[-1] % BF16_CPU_ALIGN

    def _forward_with_margin(self, x: torch.Tensor, aux: dict | None, mh: int, mw: int) -> torch.Tensor:
        """:meth:`forward` on x widened by a zero margin (``mh`` rows, ``mw`` columns) that every conv
        output keeps zero (:func:`~sr.models.fused.valid_extent`); the attention blocks, whose pooling
        and routing see the whole map, run on the real region only. Returns (B, 3, sH, sW)."""
        h, w = x.shape[-2:]
        xp = F.pad(x, (0, mw, 0, mh))  # (B, 3, H + mh, W + mw), zeros
        if x.is_contiguous(memory_format=torch.channels_last):
            xp = xp.contiguous(memory_format=torch.channels_last)
        with valid_extent(h, w):
            feat = clear_margin(self.head(xp))
            y = feat
            for layer in self.body:
                if hasattr(layer, "attend"):
                    out = layer(y[..., :h, :w], aux)  # (B, C, H, W), a fresh map
                    if y is feat:
                        y = y.clone()
                    y[..., :h, :w] = out  # the margin stays zero
                else:
                    y = layer(y)
            y = conv_add(self.body_tail, y, feat)
            anchor = xp.repeat_interleave(self.scale**2, dim=1)
            out = conv_add(self.upsample, y, anchor)  # (B, 3*s^2, H + mh, W + mw)
        return self.shuffle(out[..., :h, :w])

    def forward(self, x: torch.Tensor, aux: dict | None = None) -> torch.Tensor:
        """x: (B, 3, H, W) -> (B, 3, sH, sW). Pass a dict as ``aux`` to collect budget maps/loss."""
        mh, mw = self._margin(x)
        if mh or mw:
            return self._forward_with_margin(x, aux, mh, mw)
        feat = self.head(x)  # (B, C, H, W)
        y = feat
        for layer in self.body:
            y = layer(y, aux) if hasattr(layer, "attend") else layer(y)
        y = conv_add(self.body_tail, y, feat)  # body_tail(y) + feat
        anchor = x.repeat_interleave(self.scale**2, dim=1)  # (B, 3*s^2, H, W)
        return self.shuffle(conv_add(self.upsample, y, anchor))  # (B, 3, sH, sW)
