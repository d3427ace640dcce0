"""How far an outside model looks: the tile overlap that keeps its tiled output seam-free.

sr's tiles overlap and cross-fade; a tile's output is right only where the model saw all the input
that pixel depends on. sr's own networks were measured (16 px is within ~66 dB of the whole image);
a community model may reach much further (Real-ESRGAN Compact's 32 convolutions: 33 px). On first
use the model's receptive radius is measured once per file, torch version and CPU kind (cached like
the bf16 check): one input pixel is changed, and the radius is the largest distance at which the
output still changes by more than :data:`THRESHOLD` of the change at that pixel; the overlap is
four times that (the cross-fade gives the outer quarter of an overlap no weight), within
:data:`MAX_OVERLAP`. Such models also tile only where their memory estimate says they must
(:attr:`sr.inference.tiling.TileGrid.measured`), so most photos run whole.
"""

from __future__ import annotations

import numpy as np
import torch

from ..descriptor import ModelDescriptor
from .bf16_check import check_image, measured_once

CACHE_FILE = "receptive-radius.json"
# relative to the peak: realesr-general-x4v3 measures 32 px (its convolutions reach 33)
THRESHOLD = 1e-5
MAX_RADIUS = 32  # the measurement's window; models that reach further (global attention) get the cap
# 4 x the reach: the cross-fade (BLEND_RAMP 0.5) gives the outer quarter of an overlap no weight, so
# every pixel that counts saw all it depends on. 128 px is a 1,300 px tile's 40% more pixels.
MAX_OVERLAP = 4 * MAX_RADIUS


def measure_radius(desc: ModelDescriptor) -> float:
    """The model's receptive radius in input pixels (at most :data:`MAX_RADIUS`): how far the change
    of one input pixel reaches in the output, from two forwards in fp32 on the CPU (forwards only:
    no gradients, so models with in-place layers measure too)."""
    from .describe import load_network

    arch = desc.arch
    assert arch is not None
    model = load_network(desc).model.float()  # the raw module: no clamp to hide a change
    side = 2 * MAX_RADIUS + 1
    step = max(arch.multiple_of, 1)
    padded = max(-(-side // step) * step, arch.minimum)  # the model's own size requirements
    x = check_image(padded)
    x = torch.cat([x, torch.ones_like(x[:, :1])], dim=1) if arch.input_channels == 4 else \
        x[:, : arch.input_channels]
    poked = x.clone()
    poked[:, :, MAX_RADIUS, MAX_RADIUS] = 1 - poked[:, :, MAX_RADIUS, MAX_RADIUS]
    with torch.inference_mode():
        change = (model(poked) - model(x)).abs().amax(dim=1)[0]  # (s * padded, s * padded)
    s = arch.scale
    lr = change.reshape(padded, s, padded, s).amax(dim=(1, 3))[:side, :side].numpy()  # per input pixel
    rows, cols = np.indices(lr.shape)
    dist = np.maximum(abs(rows - MAX_RADIUS), abs(cols - MAX_RADIUS))
    ring = np.array([lr[dist == d].max() for d in range(MAX_RADIUS + 1)])
    reach = np.nonzero(ring > THRESHOLD * ring.max())[0] if ring.max() > 0 else np.array([])
    return float(reach.max()) if reach.size else 0.0


def suited_overlap(desc: ModelDescriptor, at_least: int) -> int:
    """The tile overlap for ``desc`` (a model of another architecture): four times its measured
    receptive radius, rounded up to 8 px, at least ``at_least`` (the engine's) and two of its windows, at most
    :data:`MAX_OVERLAP`."""
    arch = desc.arch
    assert arch is not None
    radius = measured_once(desc, CACHE_FILE, measure_radius)
    overlap = -(-int(4 * radius) // 8) * 8
    return max(at_least, 2 * arch.multiple_of, min(overlap, MAX_OVERLAP))
