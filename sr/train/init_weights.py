"""``--init``: start a run from other weights, and what those weights had been trained for.

Tensors are copied by name and shape (x2 weights into an x3 model), body layers by their order among
residual and among attention blocks (so conv weights carry over between attention kinds), and body
layers the weights lack start as identity (a deeper preset grown from a shallower one).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..models import SRNet
from ..weights import WeightsError, read_metadata
from .config import INIT_LAYER_CHOICES


def _body_layout(keys) -> dict[int, bool]:
    """Body index -> whether that layer is an attention block, read from state-dict keys."""
    layout: dict[int, bool] = {}
    for key in keys:
        parts = key.split(".")
        if len(parts) > 2 and parts[0] == "body" and parts[1].isdigit():
            i = int(parts[1])
            layout[i] = layout.get(i, False) or parts[2] == "qkv"  # every attention branch has a qkv conv
    return layout


def _align_body(state: dict, model: SRNet, attention: bool) -> dict:
    """Rename the checkpoint's body layers to the model's by their order among layers of their kind.

    The body interleaves residual blocks and attention blocks, so a network of another attention
    kind (``none`` has no attention layers) numbers the same residual blocks differently: the n-th
    residual block goes to the n-th residual block, the n-th attention block to the n-th attention
    block (or is dropped when ``attention`` is False).
    """
    theirs = _body_layout(state)
    ours = {i: hasattr(layer, "attend") for i, layer in enumerate(model.body)}
    rename: dict[int, int | None] = {}
    for is_attn in (False, True):
        src = sorted(i for i, a in theirs.items() if a == is_attn)
        dst = sorted(i for i, a in ours.items() if a == is_attn)
        for n, i in enumerate(src):
            rename[i] = dst[n] if n < len(dst) and (attention or not is_attn) else None
    out = {}
    for key, value in state.items():
        parts = key.split(".")
        if len(parts) > 2 and parts[0] == "body" and parts[1].isdigit():
            target = rename[int(parts[1])]
            if target is None:
                continue
            key = ".".join(["body", str(target), *parts[2:]])
        out[key] = value
    return out


def load_init(model: SRNet, path: str, layers: str = "all") -> list[str]:
    """Copy every tensor whose name and shape match (e.g. x2 weights into an x3 model).

    Body layers are matched by their order among residual blocks and among attention blocks
    (:func:`_align_body`), so conv weights carry over between attention kinds too. ``layers="conv"``
    leaves every attention block fresh (the common start of an ablation). Body layers the checkpoint
    lacks entirely (a deeper preset grown from a shallower one) start as identity, their residual
    output zeroed, so the grown network computes what the loaded one did.
    """
    if layers not in INIT_LAYER_CHOICES:
        raise ValueError(f"--init-layers {layers!r} is not one of: {', '.join(INIT_LAYER_CHOICES)}")
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        state = load_file(path)
    else:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        state = ckpt.get("ema", ckpt.get("model", ckpt))
    state = _align_body(state, model, attention=layers == "all")
    own = model.state_dict()
    taken = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    if not taken:
        raise ValueError(f"--init {path} shares no tensor (name and shape) with the model being trained")
    own.update(taken)
    model.load_state_dict(own)
    fresh = set(own) - set(taken)
    for i, layer in enumerate(model.body):
        grown = all(f"body.{i}.{k}" in fresh for k in layer.state_dict())
        # a fresh attention block of a conv-only start keeps its own near-zero init, like any new branch
        if grown and not (layers == "conv" and hasattr(layer, "attend")):
            layer.start_as_identity()
    return sorted(fresh)


def init_lineage(path: str, model: SRNet, layers: str = "all") -> dict:
    """What an ``--init`` file had been trained for already.

    Our own exported weights of exactly this network (their metadata's architecture config) mean
    the run continues them (a new cycle from shipped weights after the run's checkpoints are gone):
    their steps and training time carry on into this run's export. Any other start (x2 weights for
    an x3 run, a grown preset, a foreign file) only names where it came from.
    """
    lineage: dict = {"from": Path(path).name, "steps": 0, "seconds": 0.0, "continues": False}
    if not path.endswith(".safetensors"):
        return lineage
    try:
        meta = read_metadata(path)
        lineage.update(steps=int(meta["steps"]), seconds=float(meta.get("train_seconds", 0.0)))
        # a conv-only start drops the file's attention: not a continuation even of the same network
        lineage["continues"] = layers == "all" and json.loads(meta["config"]) == model.cfg.to_dict()
    except (WeightsError, KeyError, ValueError):  # weights without our training metadata
        pass
    return lineage

