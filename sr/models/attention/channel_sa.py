"""Channel self-attention: Restormer's transposed attention (MDTA, Zamir et al. 2022), O(N C^2).

Per head, the d = C / heads channels are the tokens and the N = H W pixels their features: q and k
are L2-normalised along the pixels, the (d x d) cosine scores are scaled by a learnable temperature
per head and soft-maxed over channels, and each output channel is that mix of v's channels. Work is
N d^2 per head (N C^2 / heads in all), memory O(N C): no N x N matrix at any size. Every output pixel
depends on the whole map through the scores, so tiles see their own.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .common import AttentionBranch
from .registry import register_attention


class ChannelSelfAttention(AttentionBranch):
    def __init__(self, dim: int, heads: int, positional: bool = True, stride: int = 1) -> None:
        super().__init__(dim, heads, positional, stride)
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))  # Restormer's init

    def attend(self, q, k, v, x, aux):
        b, c, h, w = v.shape
        heads = self.heads
        # (B, C, H, W) -> (B, heads, d, N): a head's channels are its tokens, the pixels their features
        q, k, v = (t.reshape(b, heads, c // heads, h * w) for t in (q, k, v))
        # Scores are sums over all N pixels (65K at 256^2): fp32 under bf16 too, as flash attention
        # keeps its scores; the weights meet v in v's dtype.
        with torch.autocast(v.device.type, enabled=False):
            qn = F.normalize(q.float(), dim=-1)
            kn = F.normalize(k.float(), dim=-1)
            scores = (qn @ kn.transpose(-2, -1)) * self.temperature.float()  # (B, heads, d, d)
            weights = scores.softmax(dim=-1)
        out = weights.to(v.dtype) @ v  # (B, heads, d, N)
        return out.reshape(b, c, h, w)


@register_attention("channel-sa")
def build_channel_sa(dim: int, heads: int, index: int, *, stride: int = 1) -> ChannelSelfAttention:
    return ChannelSelfAttention(dim, heads, stride=stride)
