"""One object per model: network, scale, input alignment, budget cap and metadata, read in one place.

:func:`sr.weights.describe` (metadata only for sr's own files) and :func:`sr.weights.load_model` (with
the network) return a :class:`ModelDescriptor`, for sr's own weights and for model files of other
architectures alike (those read through spandrel: :mod:`sr.external`, whose statements land in
:class:`ArchInfo`). The engine, the tiler, the precision choice, the service, ``sr eval`` and
``sr info`` read scale, alignment, channels, precisions and purpose from it instead of working them
out each on their own or asking which kind of model it is (spandrel's ``ModelDescriptor`` is the
model for this).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from .models import PRESETS, NetConfig, SRNet, build_config, count_params
from .models.attention import AttentionBranch, attention_k_max, make_attention
from .shipped import SCALES


def family_of(name: str) -> str:
    """'asa-base-x2' -> 'asa-base' (a family is found as <family>-x{2,3,4}); other names are their own."""
    family, sep, scale = name.rpartition("-x")
    return family if sep and family and scale in {str(s) for s in SCALES} else name


def preset_of(cfg: NetConfig, meta: Mapping[str, str] | None = None) -> str:
    """The preset a config was built from: the weights' own note, else an exact match, else 'custom'."""
    if meta and meta.get("preset"):
        return meta["preset"]
    for name in PRESETS:
        if build_config(name, cfg.scale).to_dict() == cfg.to_dict():
            return name
    for name in PRESETS:  # the same network with a different attention kind (ablations)
        if build_config(name, cfg.scale, attention=cfg.attention).to_dict() == cfg.to_dict():
            return f"{name} (attention: {cfg.attention})"
    return "custom"


def net_align(net: torch.nn.Module) -> int:
    """The input alignment every attention block of ``net`` states (their lcm): 1 without attention."""
    align = 1
    for m in net.modules():
        if isinstance(m, AttentionBranch):
            align = math.lcm(align, m.align)
    return align


def config_align(cfg: NetConfig) -> int:
    """:func:`net_align` of the network ``cfg`` builds, from its attention blocks alone (built as the
    network builds them, a few small layers): no conv body, no weights."""
    if cfg.attention == "none":
        return 1
    align = 1
    for index in range(cfg.blocks // cfg.attn_every):  # one attention block after every attn_every-th
        block = make_attention(cfg.attention, cfg.channels, cfg.heads, index, **cfg.attn_options)
        align = math.lcm(align, net_align(block))
    return align


@dataclass(frozen=True)
class ArchInfo:
    """What spandrel states of a model file of another architecture (:mod:`sr.external`)."""

    architecture: str  # spandrel's name, e.g. "RealESRGAN Compact"
    scale: int  # 1 for restoration models (denoise, de-JPEG, deblur)
    input_channels: int  # 3 (RGB), 1 (gray) or 4 (RGBA)
    output_channels: int
    params: int
    feature_channels: int  # the widest layer's output channels: the tile memory estimate's width
    multiple_of: int = 1  # input sides must be multiples of this (the network pads to it)
    minimum: int = 0  # input sides must be at least this (the network pads to it)
    square: bool = False
    bf16: bool = False  # spandrel says the architecture runs in bf16
    fp16: bool = False
    purpose: str = "SR"  # spandrel's: SR, FaceSR, Restoration
    tiling: str = "supported"  # supported, discouraged (global context) or internal (tiles itself)
    tags: tuple[str, ...] = ()
    # the attention window the network partitions its input into (SwinIR, HAT, OmniSR, ATD: their
    # window_size; 1 without one): tiles must start on that grid, or each cuts other windows than
    # the whole image does
    window: int = 1


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


@dataclass
class ModelDescriptor:
    """A model as callers use it. ``net`` is None for a metadata-only descriptor (``describe``):
    everything but the weights is known then, and :func:`sr.weights.loaded` reads them (files are
    sr.weights' business: this module imports nothing of it).

    sr's own networks have a ``config``; a model of another architecture has ``arch`` instead (and
    its ``net`` is an :class:`sr.external.network.ExternalNet`, which takes and gives what SRNet
    does)."""

    config: NetConfig | None
    name: str  # the weights file's stem ("asa-base-x2"), or the preset name of an unsaved network
    path: Path | None = None  # the weights file; None for a preset or an in-memory network
    meta: Mapping[str, str] = field(default_factory=dict)  # the file's metadata strings, as stored
    net: torch.nn.Module | None = None  # an SRNet, or an ExternalNet with ``arch``
    arch: ArchInfo | None = None  # another architecture's statements (then ``config`` is None)

    @classmethod
    def from_net(cls, net: SRNet, name: str | None = None) -> ModelDescriptor:
        """An in-memory network (a preset with random weights, a test model) as a descriptor."""
        return cls(net.cfg, name or f"{preset_of(net.cfg)}-x{net.scale}", net=net)

    # -- architecture ------------------------------------------------------------------------
    @property
    def own(self) -> bool:
        """Whether this is one of sr's own networks (blends, budget maps and bf16 records apply)."""
        return self.arch is None

    @property
    def architecture(self) -> str:
        """'sr' for sr's own networks, else spandrel's name of the architecture."""
        return "sr" if self.arch is None else self.arch.architecture

    @property
    def scale(self) -> int:
        return int(self.config.scale) if self.arch is None else self.arch.scale

    @property
    def purpose(self) -> str:
        """'upscale' (scale > 1) or 'restore' (a 1x model: denoise, de-JPEG, deblur: ``--pre``)."""
        return "upscale" if self.scale > 1 else "restore"

    @property
    def input_channels(self) -> int:
        return 3 if self.arch is None else self.arch.input_channels

    @property
    def feature_channels(self) -> int:
        """Width of the network's activations, for the tile policy's memory estimate."""
        return self.config.channels if self.arch is None else self.arch.feature_channels

    @property
    def supports_bf16(self) -> bool:
        return True if self.arch is None else self.arch.bf16

    @property
    def supports_fp16(self) -> bool:
        return True if self.arch is None else self.arch.fp16

    @property
    def tiling(self) -> str:
        """'supported', or spandrel's 'discouraged'/'internal' (auto tiling then runs it whole)."""
        return "supported" if self.arch is None else self.arch.tiling

    @property
    def size_requirements(self) -> str:
        """Input size requirements as words, for ``sr info``."""
        if self.arch is None:
            return f"any size (tiles start at multiples of {self.align})"
        parts = [f"multiple of {self.arch.multiple_of}"] if self.arch.multiple_of > 1 else []
        if self.arch.minimum:
            parts.append(f"at least {self.arch.minimum} px")
        if self.arch.square:
            parts.append("square")
        return ("any size" if not parts else ", ".join(parts) + " (padded by the network)")

    @property
    def attention(self) -> str:
        return self.config.attention if self.config is not None else "none"

    @property
    def k_max(self) -> float | None:
        """The budget cap its attention kind states for its options (the top of the budget map's
        scale), read from the registry before any weights are loaded; None without a budget."""
        if self.config is None:
            return None
        return attention_k_max(self.config.attention, self.config.attn_options)

    @property
    def has_budget(self) -> bool:
        return self.k_max is not None

    @cached_property
    def align(self) -> int:
        """Tile starts must be multiples of this (attention stride x region or window), as the
        blocks state it: the loaded network's, else its config's attention blocks' (no network is
        built and nothing is read, as spandrel's descriptors state their size requirements)."""
        if self.config is None:
            # ExternalNet pads every input to the model's own size requirements, but a network that
            # works in blocks of multiple_of pixels (pixel-unshuffle, pooling) or in attention windows
            # gives the whole image's answer on a tile only where the tile starts on that grid
            return 1 if self.arch is None else math.lcm(self.arch.multiple_of, self.arch.window)
        return net_align(self.net) if self.net is not None else config_align(self.config)

    # -- metadata ----------------------------------------------------------------------------
    @property
    def family(self) -> str:
        """What ``Upscaler(model=...)`` finds this file under: <family>-x{2,3,4}.safetensors."""
        return family_of(self.name) if self.arch is None else self.name

    @property
    def preset(self) -> str:
        return preset_of(self.config, self.meta) if self.config is not None else self.architecture

    @property
    def params(self) -> int:
        if self.arch is not None:
            return self.arch.params
        stored = _int(self.meta.get("params"))
        if stored is not None:
            return stored
        return count_params(self.net if self.net is not None else SRNet(self.config))

    @property
    def steps(self) -> int | None:
        return _int(self.meta.get("steps"))

    @property
    def train_data(self) -> str | None:
        return self.meta.get("train_data")

    @property
    def validation(self) -> dict[str, Any]:
        """{set: {"psnr": ..., "ssim": ...}} as exported, {} when absent or unreadable."""
        try:
            value = json.loads(self.meta.get("validation", "{}")) or {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
