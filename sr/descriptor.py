"""One object per model: network, scale, input alignment, budget cap and metadata, read in one place.

:func:`sr.weights.describe` (metadata only, no tensors read) and :func:`sr.weights.load_model` (with
the network) return a :class:`ModelDescriptor`; the engine, the service, ``sr eval`` and ``sr info``
read scale, ``align`` and ``k_max`` from it instead of working them out each on their own (spandrel's
``ModelDescriptor`` is the model for this).
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
from .shipped import SCALES as SCALES  # defined without torch, for the CLI's early checks


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


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


@dataclass
class ModelDescriptor:
    """A model as callers use it. ``net`` is None for a metadata-only descriptor (``describe``):
    everything but the weights is known then, and :func:`sr.weights.loaded` reads them (files are
    sr.weights' business: this module imports nothing of it)."""

    config: NetConfig
    name: str  # the weights file's stem ("asa-base-x2"), or the preset name of an unsaved network
    path: Path | None = None  # the weights file; None for a preset or an in-memory network
    meta: Mapping[str, str] = field(default_factory=dict)  # the file's metadata strings, as stored
    net: SRNet | None = None

    @classmethod
    def from_net(cls, net: SRNet, name: str | None = None) -> ModelDescriptor:
        """An in-memory network (a preset with random weights, a test model) as a descriptor."""
        return cls(net.cfg, name or f"{preset_of(net.cfg)}-x{net.scale}", net=net)

    # -- architecture ------------------------------------------------------------------------
    @property
    def scale(self) -> int:
        return int(self.config.scale)

    @property
    def attention(self) -> str:
        return self.config.attention

    @property
    def k_max(self) -> float | None:
        """The budget cap its attention kind states for its options (the top of the budget map's
        scale), read from the registry before any weights are loaded; None without a budget."""
        return attention_k_max(self.config.attention, self.config.attn_options)

    @property
    def has_budget(self) -> bool:
        return self.k_max is not None

    @cached_property
    def align(self) -> int:
        """Tile starts must be multiples of this (attention stride x region or window), as the
        blocks state it: the loaded network's, else its config's attention blocks' (no network is
        built and nothing is read, as spandrel's descriptors state their size requirements)."""
        return net_align(self.net) if self.net is not None else config_align(self.config)

    # -- metadata ----------------------------------------------------------------------------
    @property
    def family(self) -> str:
        """What ``Upscaler(model=...)`` finds this file under: <family>-x{2,3,4}.safetensors."""
        return family_of(self.name)

    @property
    def preset(self) -> str:
        return preset_of(self.config, self.meta)

    @property
    def params(self) -> int:
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
