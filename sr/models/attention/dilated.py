"""Dilated window attention: windows of w x w tokens taken every d-th position, long range at window cost.

Positions split into d*d dilation groups by (y mod d, x mod d); each group is a map of its own, tiled
by w x w windows, and each query attends within its window there. A window then spans w*d pixels
per side at the cost of a w x w one (the sparse windows of DiNAT and MaxViT's grid attention, where
MaxViT takes d = H / w). With d = 1 it is W-MSA without the shift.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import AttentionBranch, merge_heads, pad_to_multiple, split_heads
from .registry import register_attention


class DilatedAttention(AttentionBranch):
    has_static_path = True

    def __init__(
        self, dim: int, heads: int, window: int = 8, dilation: int = 2, positional: bool = True,
        stride: int = 1,
    ) -> None:
        if window < 1 or dilation < 1:
            raise ValueError(f"window and dilation must be positive, got {window} and {dilation}")
        super().__init__(dim, heads, positional, stride)
        self.window, self.dilation = window, dilation
        self.static = False  # inference path: pad when needed (False) or always (fixed shapes)

    @property
    def align(self) -> int:
        return self.stride * self.window * self.dilation  # window spans tile the pooled map from its top left

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        ws, dil = self.window, self.dilation
        static = self.static and not (self.training and torch.is_grad_enabled())
        # reflect-pad to whole spans, as window attention pads to whole windows
        qkv, _, _ = pad_to_multiple(torch.cat([q, k, v], 1), ws * dil, always=static)
        hp, wp = qkv.shape[-2:]
        hb, wb = hp // (ws * dil), wp // (ws * dil)
        # y = (block * ws + i) * dil + group: (B, 3C, Hp, Wp) -> (B, 3C, Hb, ws, dil, Wb, ws, dil)
        # -> (B, Hb, dil, Wb, dil, ws, ws, 3C) -> (B*Hb*dil*Wb*dil, ws*ws, 3C): one row per (window, group)
        t = qkv.view(b, 3 * c, hb, ws, dil, wb, ws, dil).permute(0, 2, 4, 5, 7, 3, 6, 1)
        t = t.reshape(-1, ws * ws, 3 * c)
        q, k, v = (split_heads(u, self.heads) for u in t.chunk(3, dim=-1))  # (B*nW, heads, ws^2, d)
        out = F.scaled_dot_product_attention(q, k, v)  # (B*nW, heads, ws^2, d)
        # (B, Hb, dil, Wb, dil, ws, ws, C) -> (B, C, Hb, ws, dil, Wb, ws, dil) = (B, C, Hp, Wp)
        out = merge_heads(out).view(b, hb, dil, wb, dil, ws, ws, c).permute(0, 7, 1, 5, 2, 3, 6, 4)
        out = out.reshape(b, c, hp, wp)[:, :, :h, :w]
        # static: a fresh copy, as topk's, since the crop's strides depend on the padding (a guard per
        # size class when compiled)
        return out.clone(memory_format=torch.channels_last) if static else out


@register_attention("dilated")
def build_dilated(
    dim: int, heads: int, index: int, *, window: int = 8, dilation: int = 2, stride: int = 1
) -> DilatedAttention:
    return DilatedAttention(dim, heads, window=window, dilation=dilation, stride=stride)
