"""Neighbourhood attention (NA): each query attends to the k x k keys around itself.

The overlapping cousin of W-MSA (Hassani et al., Neighborhood Attention Transformer): the window
follows the query instead of a fixed grid, so there are no window borders to shift across. At the
image border the window is clamped inside the image, as NATTEN does, so every query sees exactly
k*k keys (min(k, H) x min(k, W) on a map smaller than the kernel).

Plain torch: the keys of one kernel row are gathered for every query at once (an index_select of
N*k tokens), scored with one batched matmul, and the k*k scores share one softmax; the values are
gathered the same way. Eager inference runs bands of query rows whose working set stays near
:data:`BAND_BYTES` (a 256 x 256 map of 64 channels, k = 7: ~150 MB live beyond q, k and v); the
static path runs the whole map as one band (~430 MB there), a graph with no size-dependent loop,
for torch.compile and ONNX export.
"""

from __future__ import annotations

import math

import torch

from .common import AttentionBranch, large_negative
from .registry import register_attention

BAND_BYTES = 64 << 20  # eager inference: the working set of one band of query rows


def window_starts(n: int, kernel: int, device=None) -> torch.Tensor:
    """(n,) first key index of each query's window along a side of n tokens, clamped inside [0, n).

    Centred (i - kernel // 2) in the interior, shifted inwards at the borders; 0 for every query
    when n < kernel (the window is then the whole side)."""
    i = torch.arange(n, device=device)
    return (i - kernel // 2).clamp(max=n - kernel).clamp(min=0)


def _band(
    q: torch.Tensor, kf: torch.Tensor, vf: torch.Tensor, rows: torch.Tensor, h: int, w: int, kernel: int
) -> torch.Tensor:
    """Neighbourhood attention for the query rows ``rows`` of an (h, w) map.

    q: (B, heads, R, W, d) those rows' queries, pre-scaled; kf, vf: (B, heads, H*W, d) every token's
    key and value. Returns (B, heads, R, W, d).
    """
    b, heads, r, _, d = q.shape
    dev = q.device
    taps = torch.arange(kernel, device=dev)
    y = window_starts(h, kernel, dev)[rows][:, None] + taps  # (R, k) key rows of each query row
    x = window_starts(w, kernel, dev)[:, None] + taps  # (W, k) key columns of each query column
    # taps past a side shorter than the kernel: gathered clamped (a valid index), then masked
    blocked = (y >= h)[:, None, :, None] | (x >= w)[None, :, None, :]  # (R, W, k, k)
    blocked = blocked.reshape(1, 1, r * w, 1, kernel * kernel)
    y, x = y.clamp(max=h - 1), x.clamp(max=w - 1)
    qr = q.reshape(b, heads, r * w, 1, d)
    # flat token index of tap (a, b) of query (i, j): one (R, W, k) index per kernel row a
    index = [(y[:, a, None, None] * w + x[None]).flatten() for a in range(kernel)]
    scores = torch.cat(
        [qr @ kf.index_select(2, i).view(b, heads, r * w, kernel, d).transpose(-1, -2) for i in index], -1
    )  # (B, heads, R*W, 1, k*k)
    scores = scores.masked_fill_(blocked, large_negative(scores.dtype))  # fresh from cat: in place
    # softmax in fp32: under bf16 autocast the scores are bf16, and k*k of them share one normaliser
    weights = scores.float().softmax(dim=-1).to(vf.dtype)
    out = None
    for a, i in enumerate(index):
        values = vf.index_select(2, i).view(b, heads, r * w, kernel, d)
        part = weights[..., a * kernel : (a + 1) * kernel] @ values
        out = part.float() if out is None else out + part  # (B, heads, R*W, 1, d), summed in fp32
    return out.to(vf.dtype).view(b, heads, r, w, d)


def neighbourhood_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, kernel: int, band_rows: int | None = None
) -> torch.Tensor:
    """(B, C, H, W) q, k, v -> (B, C, H, W): every query attends to its clamped kernel x kernel window.

    ``band_rows``: query rows per band (None: all rows in one band, a fixed-shape graph)."""
    b, c, h, w = q.shape
    d = c // heads
    # (B, C, H, W) -> (B, heads, H, W, d): each token's d channels contiguous, for the gathers
    q = (q * (1.0 / math.sqrt(d))).reshape(b, heads, d, h, w).permute(0, 1, 3, 4, 2)
    kf, vf = (t.reshape(b, heads, d, h * w).transpose(2, 3).contiguous() for t in (k, v))  # (B, heads, HW, d)
    rows = torch.arange(h, device=q.device)
    if band_rows is None or band_rows >= h:  # no loop over the size: one graph for every size
        out = _band(q, kf, vf, rows, h, w, kernel)  # (B, heads, H, W, d)
    else:
        step = max(1, band_rows)
        bands = [_band(q[:, :, i : i + step], kf, vf, rows[i : i + step], h, w, kernel)
                 for i in range(0, h, step)]
        out = torch.cat(bands, dim=2)
    return out.permute(0, 1, 4, 2, 3).reshape(b, c, h, w)


class LocalAttention(AttentionBranch):
    has_static_path = True

    def __init__(
        self, dim: int, heads: int, kernel: int = 7, positional: bool = True, stride: int = 1
    ) -> None:
        if kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"the neighbourhood kernel must be odd and positive (it centres on the query), "
                             f"got {kernel}")
        super().__init__(dim, heads, positional, stride)
        self.kernel = kernel
        self.static = False  # inference path: row bands (False) or one fixed-shape graph; set_attention_path

    @property
    def align(self) -> int:
        return self.stride  # windows follow the query: only the stride pooling has a grid

    def band_rows(self, b: int, w: int) -> int:
        """Query rows per eager band: the gathered keys or values of one kernel row and three copies
        of the k*k fp32 scores (parts, joined, softmax) of every query in the band, which dominate its
        working set, within BAND_BYTES."""
        per_row = b * w * (self.kernel * self.dim * 4 + 3 * self.heads * self.kernel**2 * 4)
        return max(1, BAND_BYTES // per_row)

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        static = self.static and not (self.training and torch.is_grad_enabled())
        # training keeps every band's gathers for backward anyway: one band, no loop
        whole = static or (self.training and torch.is_grad_enabled())
        rows = None if whole else self.band_rows(b, w)
        return neighbourhood_attention(q, k, v, self.heads, self.kernel, rows)


@register_attention("local")
def build_local(dim: int, heads: int, index: int, *, kernel: int = 7, stride: int = 1) -> LocalAttention:
    return LocalAttention(dim, heads, kernel=kernel, stride=stride)
