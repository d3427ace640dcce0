"""sr's own network in spandrel's registry: after ``import sr.spandrel``, spandrel-based hosts
(chaiNNer, ComfyUI, scripts using ``spandrel.ModelLoader``) load sr's weights files.

Hosts read a ``.safetensors`` file's tensors only (spandrel drops the metadata :mod:`sr.weights`
rebuilds the network from), so the network is recognised and its :class:`~sr.models.NetConfig`
rebuilt from key names and tensor shapes alone:

- detection: exactly SRNet's four top-level modules (``head``, ``body``, ``body_tail``,
  ``upsample``); no spandrel architecture has a ``body_tail``, and no other key is allowed;
- from shapes: scale (the upsampler's 3 * s^2 outputs), channels, residual blocks, where the
  attention blocks sit (``attn_every``), channel attention (ECA/SE) and which attention kinds'
  blocks have exactly these tensors (``adaptive`` has a budget gate; ``dense``, ``window`` and
  ``topk`` have the same tensors);
- not in any tensor: heads and the attention options (region, stride, budget...). They come from the
  presets of that width (:data:`sr.models.PRESETS`), as ``sr train`` builds every network from a
  preset. Where the candidates behave differently the state dict is refused with the reason, except
  that the default preset wins a tie it is part of: ``asa2-base`` and ``asa3-base`` (experimental,
  no shipped weights) have ``asa-base``'s tensors exactly, and every shipped file must load. The
  preset assumed is the descriptor's first tag.

The output equals what sr writes: ``SRNet.forward`` clamped to [0, 1] (spandrel clamps too). SRNet
takes any input size (its attention blocks pad their own maps), so there is no size requirement:
spandrel's reflect padding to the attention's alignment would change the output at every size
that is not a multiple of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

try:
    import spandrel
except ModuleNotFoundError as e:
    if e.name != "spandrel":  # spandrel is there but something it needs is not: that is its error
        raise
    raise ImportError('sr.spandrel needs spandrel: pip install spandrel (the "models" extra)') from None

import torch
from spandrel import (
    Architecture,
    ArchRegistry,
    ArchSupport,
    ImageModelDescriptor,
    ModelTiling,
    SizeRequirements,
    StateDict,
)

from .descriptor import preset_of
from .models import DEFAULT_PRESET, PRESETS, NetConfig, SRNet, build_config
from .models.attention import attention_kinds, get_attention
from .models.blocks import ResBlock

ARCH_ID = "sr.SRNet"
ARCH_NAME = "sr SRNet (adaptive sparse attention)"

_TOP_LEVEL = frozenset({"head", "body", "body_tail", "upsample"})
_REQUIRED = tuple(f"{m}.{t}" for m in ("head", "body_tail", "upsample") for t in ("weight", "bias"))
_CHANNEL_ATTENTION = (None, "eca", "se")

Shapes = dict[str, tuple[int, ...]]


class SRStateDictError(ValueError):
    """A state dict with sr's key pattern that no sr network matches, or that several match."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"sr network: {reason}")


def detect(state_dict: StateDict) -> bool:
    """SRNet's key pattern: tensors of head, body_tail and upsample, and of no module SRNet lacks.
    Module names only, so that a damaged sr file (a tensor missing or misshapen) is reported by
    :func:`load_config` as such, instead of as a model spandrel does not know."""
    modules = {k.partition(".")[0] for k in state_dict}
    return modules <= _TOP_LEVEL and {"head", "body_tail", "upsample"} <= modules


def _shapes(module: torch.nn.Module) -> Shapes:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def config_shapes(cfg: NetConfig) -> Shapes:
    """{key: shape} of the network ``cfg`` builds, on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        return _shapes(SRNet(cfg))


def _body_layers(shapes: Shapes) -> list[Shapes]:
    """``body.<i>.<rest>`` keys grouped by layer, in order; body indices must run 0..n-1."""
    layers: dict[int, Shapes] = {}
    for key, shape in shapes.items():
        if not key.startswith("body."):
            continue
        index, _, rest = key[len("body."):].partition(".")
        if not index.isdigit() or not rest:
            raise SRStateDictError(f"unexpected tensor {key!r} (body tensors are body.<layer>.<name>)")
        layers.setdefault(int(index), {})[rest] = shape
    gaps = sorted(set(range(max(layers, default=-1) + 1)) - set(layers))
    if gaps:
        raise SRStateDictError(f"body layer(s) {', '.join(map(str, gaps[:5]))} have no tensors")
    return [layers[i] for i in range(len(layers))]


def _scale(shapes: Shapes) -> int:
    out = shapes["upsample.weight"][0] if shapes["upsample.weight"] else 0
    scale = math.isqrt(out // 3)
    if out % 3 or 3 * scale * scale != out or scale not in (2, 3, 4):
        raise SRStateDictError(f"the upsampler has {out} output channels; sr's have 12, 27, 48 (x2, x3, x4)")
    return scale


def _channels(shapes: Shapes) -> int:
    head = shapes["head.weight"]
    if len(head) != 4 or head[1:] != (3, 3, 3):
        raise SRStateDictError(f"head.weight has shape {head}; sr's is (channels, 3, 3, 3): RGB in")
    return head[0]


def _channel_attention(block: Shapes, channels: int) -> str | None:
    """The channel attention kind whose residual block has exactly ``block``'s tensors."""
    for kind in _CHANNEL_ATTENTION:
        with torch.device("meta"):
            if _shapes(ResBlock(channels, kind)) == block:
                return kind
    raise SRStateDictError(f"the first residual block is not one of {channels} channels that sr builds "
                           f"({', '.join(sorted(block))})")


def _candidates(shapes: Shapes) -> list[NetConfig]:
    """Every config sr could have built with these shape fields: with attention blocks, the heads and
    options of each preset of this width under each attention kind (the presets and their
    ablations); without, the attention-free presets and a plain config (heads and options then
    change nothing)."""
    scale, channels = _scale(shapes), _channels(shapes)
    layers = _body_layers(shapes)
    is_block = ["conv1.weight" in layer for layer in layers]
    blocks = sum(is_block)
    ca = _channel_attention(layers[is_block.index(True)], channels) if blocks else None
    fields = dict(scale=scale, channels=channels, blocks=blocks, channel_attention=ca)
    if all(is_block):
        plain = [build_config(p, scale, channel_attention=ca)
                 for p, opts in PRESETS.items() if opts["attention"] == "none"]
        return [*plain, NetConfig(attention="none", **fields)]
    attn_every = is_block.index(False)  # residual blocks before the first attention block
    if attn_every == 0:
        raise SRStateDictError("body.0 is not a residual block (sr's body starts with one)")
    presets = [opts for opts in PRESETS.values() if opts["channels"] == channels]
    if not presets:
        widths = ", ".join(str(w) for w in sorted({p["channels"] for p in PRESETS.values()}))
        raise SRStateDictError(
            f"{channels} channels with attention: heads and attention options are not in the tensors and no "
            f"sr preset has this width to take them from (presets: {widths}); load it with sr, whose weights "
            "metadata names them")
    return [NetConfig(attention=kind, attn_every=attn_every, heads=opts["heads"],
                      attn_options=dict(opts["attn_options"]), **fields)
            for opts in presets for kind in attention_kinds() if kind != "none"]


def _effective(cfg: NetConfig) -> tuple:
    """What of ``cfg`` the forward pass depends on beyond the tensors' shapes: the attention kind,
    heads and the options that kind reads (its defaults filled in)."""
    if cfg.attention == "none":
        return ("none",)
    variant = get_attention(cfg.attention)
    options = {**variant.defaults, **{k: v for k, v in cfg.attn_options.items() if k in variant.defaults}}
    return cfg.attention, cfg.heads, tuple(sorted(options.items()))


def _differences(expected: Shapes, found: Shapes) -> list[str]:
    missing = [f"missing {k}" for k in sorted(set(expected) - set(found))]
    unexpected = [f"unexpected {k}" for k in sorted(set(found) - set(expected))]
    shaped = [f"{k} has shape {found[k]}, expected {expected[k]}"
              for k in sorted(set(expected) & set(found)) if expected[k] != found[k]]
    return missing + unexpected + shaped


def load_config(state_dict: Mapping[str, torch.Tensor]) -> NetConfig:
    """The :class:`NetConfig` whose network has exactly ``state_dict``'s tensors, or
    :class:`SRStateDictError` saying why none or several do (see the module's docstring)."""
    for key, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            raise SRStateDictError(f"{key} is not a floating-point tensor")
        if not torch.isfinite(tensor).all():
            raise SRStateDictError(f"{key} holds NaN or infinite values")
    shapes = {k: tuple(v.shape) for k, v in state_dict.items()}
    missing = [k for k in _REQUIRED if k not in shapes]
    if missing:
        raise SRStateDictError(f"tensors do not match an sr network: missing {', '.join(missing)}")
    built: list[tuple[NetConfig, list[str]]] = []
    for cfg in _candidates(shapes):
        try:
            built.append((cfg, _differences(config_shapes(cfg), shapes)))
        except (TypeError, ValueError):  # options a kind's builder refuses (e.g. heads not dividing)
            continue
    matches = [cfg for cfg, diff in built if not diff]
    if not matches:
        if not built:
            raise SRStateDictError("no sr network can be built with these shapes")
        diff = min((d for _, d in built), key=len)
        more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
        raise SRStateDictError(f"tensors do not match an sr network: {'; '.join(diff[:3])}{more}")
    if len({_effective(cfg) for cfg in matches}) == 1:
        return matches[0]
    default = _effective(build_config(DEFAULT_PRESET, matches[0].scale))
    for cfg in matches:
        if _effective(cfg) == default:
            return cfg
    kinds = ", ".join(sorted({cfg.attention for cfg in matches}))
    presets = ", ".join(name for name, opts in PRESETS.items() if opts["channels"] == matches[0].channels)
    raise SRStateDictError(
        f"its tensors fit several sr networks that compute differently (attention {kinds}, with the options "
        f"of {presets}), and neither the kind nor the options are in the tensors: load it with sr, whose "
        "weights metadata names them")


class SRNetArch(Architecture[SRNet]):
    def __init__(self) -> None:
        super().__init__(id=ARCH_ID, name=ARCH_NAME, detect=detect)

    def load(self, state_dict: StateDict) -> ImageModelDescriptor[SRNet]:
        cfg = load_config(state_dict)
        return ImageModelDescriptor(
            SRNet(cfg),
            state_dict,
            architecture=self,
            purpose="SR",
            tags=[preset_of(cfg), f"{cfg.channels}nf", f"{cfg.blocks}nb", cfg.attention],
            # fp16 and bf16 measured against fp32 on CPU for every shipped file (docs/models.md);
            # fp16 was not checked on a GPU, where hosts usually run it
            supports_half=True,
            supports_bfloat16=True,
            scale=cfg.scale,
            input_channels=3,
            output_channels=3,
            size_requirements=SizeRequirements(),  # any size: the attention blocks pad their own maps
            tiling=ModelTiling.SUPPORTED,
            # no call_fn: spandrel's default, model(image), is SRNet.forward with no budget maps
        )


ARCHITECTURE = SRNetArch()


def register(registry: ArchRegistry | None = None) -> ArchSupport:
    """Add sr's architecture to ``registry`` (spandrel's main one by default), detected before those
    already there: its detection is strict, and a looser one claiming sr's tensors would load them
    wrongly without a word. A registry already holding it is left as it is (importing twice, or a
    host that registered it itself)."""
    registry = spandrel.MAIN_REGISTRY if registry is None else registry
    held = registry.get(ARCH_ID)
    if held is not None:
        return held
    others = tuple(a.architecture.id for a in registry.architectures())
    registry.add(ArchSupport(ARCHITECTURE, detect, before=others), ignore_duplicates=True)
    return registry[ARCH_ID]


register()
