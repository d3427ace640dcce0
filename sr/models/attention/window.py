"""Swin-style window attention (W-MSA), with the shifted variant (SW-MSA) and its mask."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import AttentionBranch, merge_heads, pad_to_multiple, split_heads
from .registry import register_attention


def shift_mask(h: int, w: int, window: int, shift: int, device=None) -> torch.Tensor:
    """Blocked-pair mask for shifted windows: (nW, window^2, window^2), True = blocked.

    After a cyclic shift, a window can hold tokens from up to four image areas that were not
    neighbours; tokens may only attend within their own area (Liu et al., Swin Transformer).
    """
    area = torch.zeros(h, w, dtype=torch.long, device=device)
    cuts = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    label = 0
    for hs in cuts:
        for ws in cuts:
            area[hs, ws] = label
            label += 1
    win = area.view(h // window, window, w // window, window).transpose(1, 2).reshape(-1, window * window)
    return win[:, :, None] != win[:, None, :]


class WindowAttention(AttentionBranch):
    def __init__(
        self, dim: int, heads: int, window: int = 8, shift: bool = False, positional: bool = True,
        stride: int = 1,
    ):
        super().__init__(dim, heads, positional, stride)
        self.window = window
        self.shift = window // 2 if shift else 0

    @property
    def align(self) -> int:
        return self.stride * self.window  # windows tile the stride-pooled map from its top left

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        ws = self.window
        qkv, _, _ = pad_to_multiple(torch.cat([q, k, v], 1), ws)
        hp, wp = qkv.shape[-2:]
        shift = self.shift if min(hp, wp) > ws else 0  # one window: nothing to shift
        if shift:
            qkv = torch.roll(qkv, shifts=(-shift, -shift), dims=(2, 3))
        # (B, 3C, Hp, Wp) -> (B*nW, ws*ws, 3C)
        t = qkv.view(b, 3 * c, hp // ws, ws, wp // ws, ws).permute(0, 2, 4, 3, 5, 1)
        t = t.reshape(-1, ws * ws, 3 * c)
        q, k, v = (split_heads(u, self.heads) for u in t.chunk(3, dim=-1))  # (B*nW, heads, ws^2, d)
        mask = None
        if shift:
            blocked = shift_mask(hp, wp, ws, shift, q.device)  # (nW, ws^2, ws^2)
            # SDPA's boolean mask means "may attend": invert our blocked convention.
            mask = (~blocked).repeat(b, 1, 1)[:, None]  # (B*nW, 1, ws^2, ws^2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B*nW, heads, ws^2, d)
        out = merge_heads(out).view(b, hp // ws, wp // ws, ws, ws, c).permute(0, 5, 1, 3, 2, 4)
        out = out.reshape(b, c, hp, wp)
        if shift:
            out = torch.roll(out, shifts=(shift, shift), dims=(2, 3))
        return out[:, :, :h, :w]


@register_attention("window")
def build_window(dim: int, heads: int, index: int, *, window: int = 8, stride: int = 1) -> WindowAttention:
    # odd blocks shift by half a window (SW-MSA), so information crosses window borders
    return WindowAttention(dim, heads, window=window, shift=index % 2 == 1, stride=stride)
