"""``sr info``: the shipped models in a few lines (metadata only: fast); ``sr info MODEL``: the
architecture, params, MACs and training metadata of a family (each scale), a model, a weights file or
a preset; ``sr info --all``: every preset, the untrained experimental ones included."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch

from .. import terms
from ..descriptor import ModelDescriptor
from ..errors import CLIError
from ..models import PRESETS, NetConfig, SRNet, build_model, count_macs, count_params, parse_name
from ..models.attention import get_attention
from ..shipped import is_model_path, weights_folder
from ..weights import (
    WeightsError,
    catalog,
    find_models,
    loaded,
    resolve_weights,
    shipped_models,
)
from ..weights import describe as describe_weights
from .weights_dir import add_weights_dir_argument, checked_weights_dir

# Imports are at the top: the descriptor already imports torch, so none of them adds start-up time.

# Weights metadata shown in this order under readable labels; the rest is listed as-is.
META_FIELDS = {
    "name": "trained as",  # the training run's name; the heading is the model's own (the file's stem)
    "init": "started from",
    "steps": "training steps",
    "best_step": "best step",
    "batch": "batch",
    "patch": "patch (LR)",
    "train_seconds": "training time",
    "hardware": "hardware",
    "train_data": "training data",
    "rescale": "rescale (last cycle)",
    "rgb_perm": "RGB reorder share (last cycle)",
    "loss": "loss (last cycle)",
    "validation": "validation",
}
META_HIDDEN = {"format", "config", "scale", "params", "preset", "attention"}

# Notes written into weights files by their training runs can cite the project's tracker ("issue N's
# conv-only arm"); a user has no tracker, so sr info shows them without it.
_TRACKER_OWNER = re.compile(r"\b[Ii]ssue \d+'s\s+")                # "issue N's conv-only arm" -> "the ..."
_TRACKER_ASIDE = re.compile(r"\s*\((?:see )?[Ii]ssue \d+[^()]*\)")  # " (issue N, row E)" -> ""
_TRACKER_WORD = re.compile(r"\s*\b(?:in |of |from )?[Ii]ssue \d+\b")


def public_text(text: str) -> str:
    """``text`` (a weights file's note) without references to the project's issue tracker."""
    text = _TRACKER_OWNER.sub("the ", text)
    return _TRACKER_WORD.sub("", _TRACKER_ASIDE.sub("", text)).strip()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?",
                   help="a shipped family (asa-base: each scale), a model name (asa-base-x2), a preset or "
                        "a .safetensors weights file; without it: the shipped models")
    p.add_argument("--all", action="store_true",
                   help="table of every preset at x2, x3 and x4, the experimental (untrained) ones too")
    p.add_argument(
        "--size", default="1280x720", metavar="WxH",
        help="output size that MACs are counted for (default 1280x720)",
    )
    add_weights_dir_argument(p)


def parse_size(text: str) -> tuple[int, int]:
    """'1280x720' -> (720, 1280) as (H, W)."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise CLIError(f"--size must look like 1280x720, got {text!r}") from None
    if w < 4 or h < 4:
        raise CLIError(f"--size {text} is too small")
    return h, w


def attention_summary(cfg: NetConfig) -> str:
    """'adaptive (region=4, ...)': the kind and the options it uses, as its registration names them."""
    try:
        variant = get_attention(cfg.attention)
        defaults, shown = variant.defaults, variant.summary
    except ValueError:  # a kind this install does not know: its options as stored
        defaults, shown = {}, tuple(sorted(cfg.attn_options))
    opts = {**defaults, **cfg.attn_options}
    text = ", ".join(f"{k}={opts[k]}" for k in shown)
    return f"{cfg.attention} ({text})" if text else cfg.attention


def _macs_line(model: torch.nn.Module, hw: tuple[int, int], estimate: bool = False) -> str:
    """MACs for an ``hw`` output: counted at that size, or with ``estimate`` (sr's own networks) at
    :func:`probe_size` and scaled by the area. A full count runs the network on the whole input: for
    photo-x2 at 1280x720, 4.9 s of CPU and a 1.0 GB peak against 0.8 GB without it (torch's import is
    most of that), most of what `sr info photo-x2` cost."""
    s = model.scale
    h, w = hw[0] // s, hw[1] // s
    probe = probe_size(hw, s)
    if not estimate or probe == hw:
        return f"{count_macs(model, hw) / 1e9:.2f} G for a {w * s}x{h * s} output ({w}x{h} input)"
    return (f"{estimated_macs(model, hw) / 1e9:.2f} G for a {w * s}x{h * s} output ({w}x{h} input; "
            f"estimated: counted for {probe[1]}x{probe[0]}, scaled by the area)")


def load_all(name: str, weights_dir: Path | None = None) -> list[ModelDescriptor]:
    """A family's models in ``weights_dir`` (default: the shipped weights; network loaded), smallest
    scale first; else :func:`load`'s one."""
    if not is_model_path(name) and not Path(name).exists():
        try:
            _, found = find_models(name, weights_dir)
        except WeightsError:
            found = {}
        if len(found) > 1:
            try:
                return [loaded(found[s]) for s in sorted(found)]
            except WeightsError as e:
                raise CLIError(str(e)) from None
    return [load(name, weights_dir)]


def load(name: str, weights_dir: Path | None = None) -> ModelDescriptor:
    """The descriptor (network loaded) of a weights path or a name in ``weights_dir`` (default: the
    shipped weights), else of a preset name (random weights, no metadata)."""
    path_like = is_model_path(name) or Path(name).exists()
    try:
        path = resolve_weights(name, weights_dir)
    except WeightsError as e:
        if path_like:
            raise CLIError(str(e)) from None
        try:
            parse_name(name)
        except ValueError:
            shipped = ", ".join(p.stem for p in shipped_models(weights_dir)) or "none"
            presets = ", ".join(f"{p}-x{{2,3,4}}" for p in PRESETS)
            raise CLIError(
                f"unknown model {name!r}: not a weights file, a shipped model ({shipped}) "
                f"or a preset ({presets})"
            ) from None
        return ModelDescriptor.from_net(build_model(name).eval(), name)
    try:
        return loaded(describe_weights(path))
    except WeightsError as e:
        raise CLIError(str(e)) from None


def _validation(text: str) -> str:
    try:
        results = json.loads(text)
        return ", ".join(f"{k} {v['psnr']:.3f} dB / {v['ssim']:.4f}" for k, v in results.items()) or "none"
    except (ValueError, TypeError, KeyError, AttributeError):
        return text


def _cpu_precision(desc: ModelDescriptor) -> str:
    """What --precision auto runs this file in on this machine's CPU, and why."""
    from ..inference.precision import bf16_from_pixels, choose_dtype, record_name

    dtype, why = choose_dtype("auto", torch.device("cpu"), [record_name(desc)])
    start = bf16_from_pixels()
    if dtype == torch.bfloat16 and start:
        why += f" (inputs under {start / 1e6:.2f} MP: fp32)"
    return f"auto here: {why}"


def _external_precision(desc: ModelDescriptor) -> str:
    """What --precision auto runs a model of another architecture in on this CPU, and why."""
    from ..inference.precision import bf16_from_pixels, choose_external_dtype

    dtype, why = choose_external_dtype(desc, "auto", torch.device("cpu"))
    start = bf16_from_pixels()
    if dtype == torch.bfloat16 and start:
        why += f" (inputs under {start / 1e6:.2f} MP: fp32)"
    return f"auto here: {why}"


def describe_external(desc: ModelDescriptor, hw: tuple[int, int]) -> list[tuple[str, str]]:
    """The rows of a model of another architecture: what spandrel states, and what sr makes of it."""
    arch = desc.arch
    assert arch is not None
    net = loaded(desc).net
    channels = {1: "1 (gray: each colour channel runs through it)", 3: "3 (RGB)",
                4: "4 (RGBA: sr feeds it opaque RGB and scales alpha itself)"}
    rows = [
        ("source", f"model file {desc.path}, read through spandrel"),
        ("architecture", arch.architecture + (f" ({', '.join(arch.tags)})" if arch.tags else "")),
        ("purpose", f"upscale x{desc.scale}" if desc.purpose == "upscale"
         else "1x restoration (run it with --pre, before an upscaling model)"),
        ("channels in", channels.get(arch.input_channels, str(arch.input_channels))),
        ("input size", desc.size_requirements),
        ("tiling", {"supported": "tiled like sr's own models",
                    "discouraged": "spandrel advises against tiling it: --tile auto runs it whole",
                    "internal": "it tiles internally: --tile auto runs it whole"}[arch.tiling]),
        ("params", f"{arch.params:,} ({arch.params / 1e6:.3f} M)"),
    ]
    try:
        rows.append(("MACs", _macs_line(net, hw)))
    except Exception as e:  # noqa: BLE001 - a counting hook an architecture trips is not the model's fault
        rows.append(("MACs", f"not counted ({type(e).__name__})"))
    rows += [
        ("precisions", "fp32" + (", bf16" if arch.bf16 else "") + (", fp16" if arch.fp16 else "")
         + " (as spandrel states)"),
        ("CPU precision", _external_precision(desc)),
        ("licence", "not stated in the file: the model's terms are its authors' (docs/models.md)"),
    ]
    return rows


def describe(desc: ModelDescriptor, hw: tuple[int, int]) -> list[tuple[str, str]]:
    if not desc.own:
        return describe_external(desc, hw)
    model, meta, path = loaded(desc).net, desc.meta, desc.path
    cfg = model.cfg
    n_attn = cfg.blocks // cfg.attn_every if cfg.attention != "none" else 0
    params = count_params(model)
    k_max = "none (no per-region budget)" if desc.k_max is None else f"{desc.k_max:g} key regions"
    rows = [
        ("source", f"weights file {path}" if path else "preset (random weights; no weights file)"),
        ("preset", desc.preset),
        ("scale", f"x{cfg.scale}"),
        ("channels", str(cfg.channels)),
        ("blocks", f"{cfg.blocks} residual, attention after every {cfg.attn_every} ({n_attn} attention)"),
        ("heads", str(cfg.heads)),
        ("attention", attention_summary(cfg)),
        ("channel attn", cfg.channel_attention or "none"),
        ("budget cap", k_max),
        ("input align", f"{desc.align} px (tile starts are multiples of it)"),
        ("params", f"{params:,} ({params / 1e6:.3f} M)"),
        ("MACs", _macs_line(model, hw, estimate=True)),
        ("CPU precision", _cpu_precision(desc)),
    ]
    if cfg.attention in ("topk", "adaptive"):  # what runs the routed attention's core on the CPU here
        from ..models.attention.native import kernel_status

        rows.append(("attention kernel", kernel_status()))
    if meta:
        for key, label in META_FIELDS.items():
            if key in meta:
                value = meta[key]
                if key == "validation":
                    value = _validation(value)
                elif key == "train_seconds" and value.replace(".", "", 1).isdigit():
                    value = f"{float(value) / 3600:.2f} h ({value} s)"
                elif key == "name" and value == desc.name:
                    continue  # the heading says it already
                rows.append((label, public_text(value)))
        rows += [(k, public_text(v)) for k, v in sorted(meta.items())
                 if k not in META_FIELDS and k not in META_HIDDEN]
    return rows


# `sr info --all` and `sr info MODEL` (sr's own networks) count MACs for an output this many times
# smaller per side and scale the count by the area: convs and windowed attention cost the same per
# pixel, so the estimate agrees with a count at a quarter of the side within 0.6% on every preset
# (asa-base x2 at 1280x720: 0.69 s against 42.5 s for the full count under a load of 8), and with a
# full count of the shipped files within 0.4% (photo-natural-x3 +0.35%, asa-base-x2 -0.09%,
# photo-x4 +0.10%, asa-deep-x4 +0.09%, photo-conv-x2 exact).
MACS_PROBE_SHRINK = 8
MACS_PROBE_MIN_SIDE = 256  # smaller outputs are counted as they are (already fast)
MACS_TABLE_SEED = 0  # the random weights --all counts each preset with


def probe_size(hw: tuple[int, int], scale: int) -> tuple[int, int]:
    """The reduced output size the MACs of ``hw`` are estimated from (a multiple of the scale)."""
    if min(hw) < MACS_PROBE_MIN_SIDE:
        return hw
    return (hw[0] // MACS_PROBE_SHRINK // scale * scale, hw[1] // MACS_PROBE_SHRINK // scale * scale)


def estimated_macs(model: SRNet, hw: tuple[int, int]) -> float:
    """MACs for an ``hw`` output, counted at :func:`probe_size` and scaled by the area."""
    probe = probe_size(hw, model.scale)
    return count_macs(model, probe) * (hw[0] * hw[1]) / (probe[0] * probe[1])


def table_all(hw: tuple[int, int], weights_dir: Path | None = None) -> list[list[str]]:
    shipped: dict[str, list[str]] = {}  # "<preset>-x<scale>" -> the shipped files of that network
    for d in catalog(weights_dir):
        tag = f"{d.name} (experimental)" if d.meta.get("experimental") else d.name
        shipped.setdefault(f"{d.preset}-x{d.scale}", []).append(tag)
    rows = [["model", "channels", "blocks", "attention", "params", "GMACs (est.)", "weights"]]
    for preset in PRESETS:
        for scale in (2, 3, 4):
            name = f"{preset}-x{scale}"
            # An adaptive block's MACs follow its gate, here randomly initialised: seeded, so that the
            # table is the same on every run (and the docs can quote it), the caller's RNG untouched.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(MACS_TABLE_SEED)
                model = build_model(name).eval()
            rows.append([
                name, str(model.cfg.channels), str(model.cfg.blocks), model.cfg.attention,
                f"{count_params(model):,}", f"{estimated_macs(model, hw) / 1e9:.2f}",
                ", ".join(shipped.get(name, [])) or "-",
            ])
    return rows


def shipped_lines(weights_dir: Path | None = None) -> list[str]:
    """The models of ``weights_dir`` (default: the shipped weights) by family: scales, params, one
    PSNR line and the data's terms, from the files' metadata alone (no network is built: fast)."""
    folder = weights_folder(weights_dir)
    families: dict[str, list[ModelDescriptor]] = {}
    for desc in catalog(folder):
        families.setdefault(desc.family, []).append(desc)
    if not families:
        return [f"no shipped models in {folder}"]
    lines = [f"shipped models ({folder}); sr info NAME for one in full, --all for every preset;",
             f"what the terms mean for you: the model card, {folder / 'README.md'}, Licence and terms"]
    width = max(len(f) for f in families)
    for family, descs in sorted(families.items()):
        descs.sort(key=lambda d: d.scale)
        scales = " / ".join(f"x{d.scale}" for d in descs)
        params = sorted(d.params for d in descs)
        count = f"{params[0] / 1e6:.2f} M" if params[0] == params[-1] else \
            f"{params[0] / 1e6:.2f}-{params[-1] / 1e6:.2f} M"
        data = sorted({path for d in descs for path in json.loads(d.train_data or "[]")})
        pad = " " * width
        note = next((public_text(d.meta["experimental"]) for d in descs if d.meta.get("experimental")), None)
        lines += [f"{family:<{width}}  {scales}, {count} params" + (" (experimental)" if note else ""),
                  *([f"{pad}  experimental: {note}"] if note else []),
                  f"{pad}  PSNR {_psnr_line(descs)}",
                  *_terms_lines(data, pad)]
    return lines


def _terms_lines(train_data: list[str], pad: str) -> list[str]:
    """Every condition the training data puts on use, one a line, most restrictive first."""
    first, *rest = terms.conditions(json.dumps(train_data))
    return [f"{pad}  terms: {first}", *(f"{pad}         {c}" for c in rest)]


def _psnr_line(descs: list[ModelDescriptor]) -> str:
    """'Set5 37.78 / 34.18 / 31.96 dB (x2 / x3 / x4)': the first set every scale was validated on."""
    sets = [s for s in descs[0].validation if all(s in d.validation for d in descs)]
    preferred = [s for s in ("Set5", "Set14", "valid") if s in sets] or sets
    if not preferred:
        return "not recorded in the files (the model card has its scores)"
    name = preferred[0]
    try:
        values = " / ".join(f"{float(d.validation[name]['psnr']):.2f}" for d in descs)
    except (KeyError, TypeError, ValueError):
        return "not readable in the files"
    return f"{name} {values} dB ({' / '.join(f'x{d.scale}' for d in descs)})"


def run(args: argparse.Namespace) -> int:
    hw = parse_size(args.size)
    if args.all and args.model:
        raise CLIError("give either a MODEL or --all")
    weights_dir = checked_weights_dir(args.weights_dir)
    if not args.all and not args.model:
        print("\n".join(shipped_lines(weights_dir)))
        return 0
    if args.all:
        rows = table_all(hw, weights_dir)
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        print(f"MACs for a {hw[1]}x{hw[0]} output, estimated from {MACS_PROBE_MIN_SIDE} px a side up: "
              f"counted for an output {MACS_PROBE_SHRINK}x smaller per side and scaled by the area "
              "(as sr info MODEL does)")
        for r in rows:
            cells = (c.rjust(wd) if c[:1].isdigit() else c.ljust(wd) for c, wd in zip(r, widths, strict=True))
            print("  ".join(cells).rstrip())
        return 0
    for i, desc in enumerate(load_all(args.model, weights_dir)):
        # The model's public name (its weights file's stem), not the training run's ("x2-extra"):
        # that one is the "trained as" line.
        print(("\n" if i else "") + (desc.name if desc.path else args.model))
        rows = describe(desc, hw)
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            print(f"  {key:<{width}}  {value}")
    return 0
