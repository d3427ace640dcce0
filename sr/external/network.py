"""spandrel's model behind sr's network interface: ``forward(x, aux=None)``, x (B, 3, H, W) in
[0, 1] -> (B, 3, sH, sW), so the engine's tiling, ensembles, passes and precision handle it as they
handle sr's own network.

spandrel's own call does the model-specific part (padding to the size requirements, cropping back,
the clamp); what this adds is the channel contract: sr's engine hands every model RGB (gray inputs
and alpha come as three equal channels), while community models may take one channel (gray
denoisers such as DnCNN) or four (RGBA).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ExternalNet(nn.Module):
    """``descriptor``: a spandrel ``ImageModelDescriptor`` (its ``model`` becomes this module's
    child, so ``.to()``, ``.eval()`` and ``requires_grad_`` reach its parameters)."""

    def __init__(self, descriptor: Any) -> None:
        super().__init__()
        self.model = descriptor.model
        self._descriptor = descriptor  # not a Module: its call uses self.model, moved in place
        self.scale = int(descriptor.scale)
        self.in_channels = int(descriptor.input_channels)
        self.out_channels = int(descriptor.output_channels)

    def _call(self, x: torch.Tensor) -> torch.Tensor:
        return self._descriptor(x)  # pads to the size requirements, runs, crops, clamps to [0, 1]

    def forward(self, x: torch.Tensor, aux: dict | None = None) -> torch.Tensor:
        """x: (B, 3, H, W) -> (B, 3, sH, sW). ``aux`` is accepted for the engine's budget-map calls;
        outside models have no budget map, so nothing is added to it."""
        b, c, h, w = x.shape
        if self.in_channels == 1:
            # each colour channel through the one-channel model: colour kept, gray exact (three
            # equal channels give three equal outputs)
            y = self._call(x.reshape(b * c, 1, h, w))  # (B*3, out, sH, sW)
            if y.shape[1] != 1:
                y = y.mean(dim=1, keepdim=True)
            return y.reshape(b, c, *y.shape[2:])
        if self.in_channels == 4:
            x = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)  # opaque: sr handles alpha itself
        y = self._call(x)
        if y.shape[1] == 1:
            return y.expand(-1, 3, -1, -1)
        return y[:, :3]
