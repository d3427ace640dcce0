"""Config names -> architectures (BasicSR-style registry), plus params/MACs accounting."""

from __future__ import annotations

import torch
from torch import nn

from .macs import count_forward_macs
from .network import NetConfig, SRNet

ASA = {"region": 4, "k_min": 0, "k_max": 8, "budget": 4.0, "stride": 2, "detail_prior": 0.5}
# The second design, for attention that pays its cost: full-resolution queries (stride 1), half the
# mean budget with a cap 6x the mean, so the most detailed regions can hold most of it, and a
# sharper detail prior. Its training path is tiered by budget, so the lower mean is what it costs.
ASA2 = {"region": 4, "k_min": 0, "k_max": 12, "budget": 2.0, "stride": 1, "detail_prior": 1.0}
# The third: the second with each region's own keys at rank 0, so a budget of k is local context
# plus k - 1 routed regions (pooled scoring alone almost never picks a region's own keys).
ASA3 = {**ASA2, "own_first": True}

# Presets are scale-free; a model name is "<preset>-x<scale>", e.g. "asa-base-x2".
PRESETS: dict[str, dict] = {
    "asa-small": dict(channels=40, blocks=6, attn_every=3, heads=2, attention="adaptive", attn_options=ASA),
    "asa-base": dict(channels=48, blocks=7, attn_every=3, heads=3, attention="adaptive", attn_options=ASA),
    # asa-base grown deeper (same width, blocks 8-10 and a third attention block appended): a
    # trained asa-base checkpoint initialises it exactly (`sr train --init`, new layers start as identity).
    "asa-deep": dict(channels=48, blocks=10, attn_every=3, heads=3, attention="adaptive", attn_options=ASA),
    "asa-medium": dict(channels=64, blocks=8, attn_every=4, heads=4, attention="adaptive", attn_options=ASA),
    # asa-base's body with the second attention design (same parameters: only the routing differs)
    "asa2-base": dict(channels=48, blocks=7, attn_every=3, heads=3, attention="adaptive", attn_options=ASA2),
    "asa3-base": dict(channels=48, blocks=7, attn_every=3, heads=3, attention="adaptive", attn_options=ASA3),
    # asa-base's body with no attention: the conv-only arm of equal compute (its MACs per LR pixel are
    # within 2% of asa-base's at every scale; the attention's MACs are small, its time is not, so
    # equal compute is given as equal training CPU-hours). The experimental photo-conv family uses it.
    "conv-base": dict(channels=48, blocks=7, attn_every=3, heads=3, attention="none", attn_options=ASA),
}
DEFAULT_PRESET = "asa-base"


def parse_name(name: str) -> tuple[str, int]:
    """'asa-base-x2' -> ('asa-base', 2), with a clear error for anything else."""
    preset, sep, scale = name.rpartition("-x")
    if not sep or preset not in PRESETS or scale not in ("2", "3", "4"):
        known = ", ".join(f"{p}-x{{2,3,4}}" for p in PRESETS)
        raise ValueError(f"unknown model {name!r}; known: {known}")
    return preset, int(scale)


def build_config(preset: str, scale: int, **overrides) -> NetConfig:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    opts = {**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}}
    return NetConfig(scale=scale, **opts)


def build_model(name_or_cfg: str | NetConfig, **overrides) -> SRNet:
    if isinstance(name_or_cfg, NetConfig):
        return SRNet(name_or_cfg)
    preset, scale = parse_name(name_or_cfg)
    return SRNet(build_config(preset, scale, **overrides))


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_macs(model: SRNet, out_hw: tuple[int, int] = (720, 1280)) -> int:
    """Multiply-accumulates for one forward pass producing an ``out_hw`` image (eval mode): every
    convolution, linear layer, matrix product and attention call as it runs (:mod:`.macs`)."""
    s = model.scale
    x = torch.zeros(1, 3, out_hw[0] // s, out_hw[1] // s, dtype=next(model.parameters()).dtype)
    return count_forward_macs(model, x)
