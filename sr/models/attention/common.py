"""Pieces shared by the attention family: the textbook attention, masking, padding, region views."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..fused import add_in_place_ok
from . import native


def large_negative(dtype: torch.dtype) -> float:
    """A fill value for blocked scores that is finite in every float dtype (no inf - inf = NaN)."""
    return torch.finfo(dtype).min / 2


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Textbook scaled dot-product attention that materialises the matrix.

    q: (..., Nq, d), k/v: (..., Nk, d); mask broadcastable to (..., Nq, Nk), True = blocked.
    Returns (output (..., Nq, d), attention weights (..., Nq, Nk)).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Nq, Nk)
    if mask is not None:
        scores = scores.masked_fill(mask, large_negative(scores.dtype))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def pad_to_multiple(x: torch.Tensor, multiple: int, always: bool = False) -> tuple[torch.Tensor, int, int]:
    """Pad (B, C, H, W) on the bottom/right to multiples of ``multiple``; returns (x, pad_h, pad_w).

    Reflect padding keeps padded tokens image-like (no zero tokens soaking up attention); tiny maps
    fall back to replicate, which reflect cannot do. ``always`` pads even by zero: no branch on the
    size, so a graph traced with symbolic sizes (torch.compile, ONNX export) holds for every size.
    """
    h, w = x.shape[-2:]
    # (-h) % multiple, written as "round up, subtract": the padded size is then a plain product
    # (regions x multiple), which keeps symbolic shapes small when traced
    ph = (h + multiple - 1) // multiple * multiple - h
    pw = (w + multiple - 1) // multiple * multiple - w
    if always or ph or pw:
        mode = "reflect" if ph < h and pw < w else "replicate"
        x = F.pad(x, (0, pw, 0, ph), mode=mode)
    return x, ph, pw


def to_head_regions(x: torch.Tensor, p: int, heads: int) -> torch.Tensor:
    """(B, C, H, W) with H, W multiples of p -> (B, heads, N, p*p, C/heads), contiguous.

    Each head's tokens of each p x p region, N = (H/p)(W/p) regions row-major: the layout in which
    one batched matmul serves every (image, head, region). Any memory format in (the view only
    splits dims); one copy.
    """
    b, c, h, w = x.shape
    x = x.view(b, heads, c // heads, h // p, p, w // p, p)  # (B, heads, d, Hr, p, Wr, p)
    return x.permute(0, 1, 3, 5, 4, 6, 2).reshape(b, heads, (h // p) * (w // p), p * p, c // heads)


def from_head_regions(x: torch.Tensor, h: int, w: int, p: int) -> torch.Tensor:
    """Inverse of :func:`to_head_regions`: (B, heads, N, p*p, d) -> (B, heads*d, H, W), channels-last."""
    b, heads, _, _, d = x.shape
    x = x.view(b, heads, h // p, w // p, p, p, d)  # (B, heads, Hr, Wr, p, p, d)
    return x.permute(0, 2, 4, 3, 5, 1, 6).reshape(b, h, w, heads * d).permute(0, 3, 1, 2)


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(..., N, C) -> (..., heads, N, C/heads)."""
    *lead, n, c = x.shape
    return x.view(*lead, n, heads, c // heads).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(..., heads, N, d) -> (..., N, heads*d)."""
    *lead, h, n, d = x.shape
    return x.transpose(-3, -2).reshape(*lead, n, h * d)


class AttentionBranch(nn.Module):
    """Shared frame of every attention block: x + proj(core(q, k, v) + lepe(v)).

    q, k, v come from one 1x1 conv; positional information is a depthwise 3x3 conv on v (LePE), which
    travels with the features and so survives gathering. Subclasses implement ``attend``.

    ``stride`` > 1 runs the branch on an average-pooled map and upsamples its output bilinearly: on
    CPU the attention then costs stride^2 less, while the conv blocks keep full-resolution detail.
    """

    # True for variants with a fixed-shape inference path behind a ``static`` flag (set_attention_path)
    has_static_path: ClassVar[bool] = False

    def __init__(self, dim: int, heads: int, positional: bool = True, stride: int = 1) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.dim, self.heads, self.stride = dim, heads, stride
        self.qkv = nn.Conv2d(dim, 3 * dim, 1)
        self.lepe = nn.Conv2d(dim, dim, 3, padding=1, groups=dim) if positional else None
        self.proj = nn.Conv2d(dim, dim, 1)
        # Near-zero output projection: a fresh branch adds ~nothing, so the network starts as its conv
        # body and the attention grows in as it learns (with the default init it adds noise to the
        # residual stream and slowed early training). Not exactly zero, so every weight has a gradient.
        nn.init.normal_(self.proj.weight, std=1e-3)
        nn.init.zeros_(self.proj.bias)

    @property
    def align(self) -> int:
        """Input alignment: a tile whose start is a multiple of this sees the grid (regions, windows)
        that the whole image does, so tiled inference matches it. 1: any start (dense attention)."""
        return 1

    @torch.no_grad()
    def start_as_identity(self) -> None:
        """Zero the output projection: the block returns its input (a layer grown into a trained net)."""
        self.proj.weight.zero_()
        self.proj.bias.zero_()

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, aux: dict | None):
        """The attention core: q, k, v = ``self.qkv(x)`` split in three; returns (B, C, H, W)."""
        raise NotImplementedError

    @torch.no_grad()
    def pooled_qk(
        self, x: torch.Tensor, p: int, pooled: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Region means of q and k, (B, N, C) each, from the p x p region means of x.

        ``pooled``: those means, ``F.avg_pool2d(x.float(), p)``, where the caller has them already.

        They only route (a top-k selection), so no autograd graph is built, in training either.

        q and k are a 1x1 conv of x, so their region means are that conv of x's region means: no
        pass over the full-resolution q and k (which, as channel slices of one map, pooling would
        first copy whole).
        """
        c = self.dim
        if pooled is None:
            pooled = F.avg_pool2d(x.float(), p)  # (B, C, H/p, W/p)
        qk = F.conv2d(pooled, self.qkv.weight[: 2 * c].float(), self.qkv.bias[: 2 * c].float())
        return tuple(t.flatten(2).transpose(1, 2) for t in qk.chunk(2, dim=1))  # type: ignore[return-value]

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
        """q, k, v of x, (B, C, H, W) each: the 1x1 ``qkv`` conv split in three. Kinds without queries
        and keys (the gates, :mod:`.gates`) project v alone and return None for q and k."""
        return self.qkv(x).chunk(3, dim=1)  # type: ignore[return-value]

    def forward(self, x: torch.Tensor, aux: dict | None = None) -> torch.Tensor:
        h, w = x.shape[-2:]
        xs = F.avg_pool2d(x, self.stride, ceil_mode=True) if self.stride > 1 else x  # (B, C, h', w')
        q, k, v = self.project(xs)  # each (B, C, h', w')
        out = self.attend(q, k, v, xs, aux)  # (B, C, h', w')
        if self.lepe is not None:
            # the routed kinds' inference output is a fresh map: add into it (the same sums) rather than
            # allocate another (other kinds may return a view of their inputs)
            fresh = self.has_static_path and add_in_place_ok()
            out = out.add_(self.lepe(v)) if fresh else out + self.lepe(v)
        out = self.proj(out)
        if self.stride > 1:
            if aux is not None and aux.get("budget_maps"):
                aux["budget_maps"][-1] = F.interpolate(aux["budget_maps"][-1], size=(h, w), mode="nearest")
            if native.upsample_add_usable(out, x):  # CPU inference: upsample and add in one pass
                return native.upsample_add(out, x)
            out = F.interpolate(out, size=(h, w), mode="bilinear", align_corners=False)
            if add_in_place_ok():
                # Inference: the upsampled map is fresh, so add into it (the same sums: IEEE addition
                # commutes) rather than allocate another full-size map.
                return out.add_(x)
        return x + out
