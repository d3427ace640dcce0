"""Convolutional building blocks: residual block with optional channel attention (ECA or SE)."""

from __future__ import annotations

import math

import torch
from torch import nn

from .fused import add_in_place_ok, conv_add, conv_relu


class ECA(nn.Module):
    """Efficient channel attention (Wang et al. 2020): a 1-D conv over pooled channels."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        k = int(abs((math.log2(dim) + 1) / 2))
        k = k if k % 2 else k + 1
        self.conv = nn.Conv1d(1, 1, k, padding=k // 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.conv(x.mean(dim=(2, 3))[:, None, :])  # (B, 1, C)
        return x * torch.sigmoid(w).transpose(1, 2)[..., None]


class SE(nn.Module):
    """Squeeze-and-excitation channel attention."""

    def __init__(self, dim: int, reduction: int = 4) -> None:
        super().__init__()
        self.fc = nn.Sequential(
            nn.Conv2d(dim, dim // reduction, 1), nn.ReLU(inplace=True), nn.Conv2d(dim // reduction, dim, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.fc(x.mean(dim=(2, 3), keepdim=True)))


def make_channel_attention(kind: str | None, dim: int) -> nn.Module:
    if kind in (None, "none"):
        return nn.Identity()
    if kind == "eca":
        return ECA(dim)
    if kind == "se":
        return SE(dim)
    raise ValueError(f"unknown channel attention {kind!r}; choose from none, eca, se")


class ResBlock(nn.Module):
    """x + CA(conv(relu(conv(x))))."""

    def __init__(self, dim: int, channel_attention: str | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(dim, dim, 3, padding=1)
        self.conv2 = nn.Conv2d(dim, dim, 3, padding=1)
        self.ca = make_channel_attention(channel_attention, dim)

    @torch.no_grad()
    def start_as_identity(self) -> None:
        """Zero conv2 (the channel attention then scales zeros): the block returns its input."""
        self.conv2.weight.zero_()
        self.conv2.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = conv_relu(self.conv1, x)
        if isinstance(self.ca, nn.Identity):
            return conv_add(self.conv2, h, x)  # x + conv2(h), fused at CPU inference
        y = self.ca(self.conv2(h))
        if not add_in_place_ok():
            return x + y
        # Inference: add into the branch's fresh output (the same sums: IEEE addition commutes)
        # instead of allocating a third full-size map, whose first touch costs more than the add.
        return y.add_(x)
