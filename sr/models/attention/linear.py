"""Linear attention (Katharopoulos et al.): a feature map instead of the softmax, O(N d^2) per head.

With phi(x) = elu(x) + 1 > 0, out_n = phi(q_n) (sum_m phi(k_m)^T v_m) / (phi(q_n) . sum_m phi(k_m)):
the d x d summary of keys and values is built once, so every query attends to the whole image at a
cost linear in its size. Global, like dense attention, so it has no grid (align 1) and no size-
dependent step: its one path is already the fixed-shape graph that torch.compile and ONNX need.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import AttentionBranch
from .registry import register_attention


def phi(x: torch.Tensor) -> torch.Tensor:
    """The positive feature map elu(x) + 1."""
    return F.elu(x) + 1


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, C, H, W) q, k, v -> (B, C, H, W): per head, phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1)."""
    b, c, h, w = q.shape
    n = h * w
    fq, fk, v = (t.reshape(b, heads, c // heads, n) for t in (phi(q), phi(k), v))  # (B, heads, d, N)
    # Means over the tokens rather than sums (the ratio is the same): sums over a large image would
    # overflow half precision.
    fk = fk / n
    kv = v @ fk.transpose(-1, -2)  # (B, heads, d_v, d_k)
    num = kv @ fq  # (B, heads, d_v, N)
    # the normaliser in fp32, and as a product and sum, not a matmul that autocast would run in bf16
    z = fk.float().sum(-1, keepdim=True)  # (B, heads, d_k, 1)
    # (B, heads, 1, N): > 0, but phi underflows to 0 far below -80 in fp32, so keep 0/0 away
    den = (fq.float() * z).sum(2, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    return (num.float() / den).to(v.dtype).reshape(b, c, h, w)


class LinearAttention(AttentionBranch):
    def attend(self, q, k, v, x, aux):
        return linear_attention(q, k, v, self.heads)


@register_attention("linear")
def build_linear(dim: int, heads: int, index: int, *, stride: int = 1) -> LinearAttention:
    return LinearAttention(dim, heads, stride=stride)
