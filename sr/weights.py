"""Safetensors weights with metadata: export from training checkpoints, checked loading, lookup.

A shipped file holds the EMA weights (no pickle) and a metadata dict of strings: the architecture
config (JSON), preset, scale, params, training data and steps, validation PSNR/SSIM. Loading builds
the architecture from that metadata and checks every tensor, so a mismatched or corrupt file gives
one clear :class:`WeightsError`.

Model files of other architectures (``.pth``/``.pt``/``.ckpt``, or a ``.safetensors`` without sr's
metadata) are described and loaded through :mod:`sr.external` (spandrel), behind the same functions.

Names become files here and only here: :func:`describe` / :func:`load_model` give one model's
:class:`~sr.descriptor.ModelDescriptor`, :func:`find_models` a family's (one per scale) and
:func:`catalog` every model of a folder. :func:`load_blend` interpolates two models of one
architecture tensor by tensor (network interpolation: ``--denoise``), :func:`load_look` photo with
photo-natural, and the result with the default family too (``--look`` with ``--denoise``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_save

from .cache import file_key
from .descriptor import ModelDescriptor
from .io import atomic_write
from .models import NetConfig, SRNet, count_params
from .shipped import SCALES, is_model_path, model_files, shipped_weights_dir, weights_folder

FORMAT = "sr-weights-v1"


# The folder names are looked up in when a function is given none (``weights_dir=None``), read at
# each call (sr.shipped.weights_folder); callers with their own folder pass it (``--weights-dir``).
WEIGHTS_DIR = shipped_weights_dir()


class WeightsError(ValueError):
    """A weights file that is missing, corrupt, or does not match its declared architecture."""


def save_weights(model: SRNet, path: str | Path, **info) -> Path:
    """Write ``model``'s state dict and metadata atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": FORMAT,
        "config": json.dumps(model.cfg.to_dict()),
        "scale": str(model.scale),
        "params": str(count_params(model)),
    }
    meta.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in info.items()})
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    # atomic_write creates files as the umask allows (safetensors' own writer makes them owner-only;
    # shipped weights are meant to be read)
    return atomic_write(path, safetensors_save(tensors, metadata=meta))


def read_metadata(path: str | Path) -> dict[str, str]:
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"weights file not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        raise WeightsError(f"{path}: not a readable safetensors file ({e})") from None
    if meta.get("format") != FORMAT:
        raise WeightsError(f"{path}: missing or unknown format metadata (expected {FORMAT!r})")
    return meta


def load_weights(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[SRNet, dict[str, str]]:
    """Build the network described by the file's metadata and load its weights (eval mode)."""
    meta = read_metadata(path)
    try:
        model = SRNet(NetConfig(**json.loads(meta["config"])))
    except (KeyError, TypeError, ValueError) as e:
        raise WeightsError(f"{path}: bad architecture metadata ({e})") from None
    try:
        state = load_file(str(path), device=str(map_location))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise WeightsError(f"{path}: corrupt tensor data ({e})") from None
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise WeightsError(f"{path}: weights do not match the declared architecture: {e}") from None
    return model.eval(), meta


def resolve_weights(name_or_path: str, weights_dir: str | Path | None = None) -> Path:
    """A path to a .safetensors file, or the name of a model in ``weights_dir`` (default: the
    shipped weights), e.g. 'asa-base-x2'."""
    p = Path(name_or_path)
    if is_model_path(p) or p.exists():
        if not p.is_file():
            raise WeightsError(f"weights file not found: {p}")
        return p
    folder = weights_folder(weights_dir)
    shipped = folder / f"{name_or_path}.safetensors"
    if shipped.is_file():
        return shipped
    known = ", ".join(sorted(f.stem for f in folder.glob("*.safetensors"))) or "none"
    raise WeightsError(
        f"unknown model {name_or_path!r}: not a file and not a shipped model (shipped: {known})"
    )


def shipped_models(weights_dir: str | Path | None = None) -> list[Path]:
    """The .safetensors files of ``weights_dir`` (default: the shipped weights), by name."""
    return sorted(weights_folder(weights_dir).glob("*.safetensors"))


def is_own_file(path: str | Path) -> bool:
    """Whether ``path`` is one of sr's own weights files (a .safetensors with sr's format metadata);
    False for a missing file and for other model files."""
    path = Path(path)
    if path.suffix.lower() != ".safetensors" or not path.is_file():
        return False
    try:
        read_metadata(path)
    except WeightsError:
        return False
    return True


def describe(path: str | Path) -> ModelDescriptor:
    """The descriptor of one model file: sr's own from its metadata alone (no tensor is read); any
    other through spandrel (:mod:`sr.external`: which reads the tensors to recognise them)."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"weights file not found: {path}")
    if not is_own_file(path):
        return _describe_external(path)
    meta = read_metadata(path)
    try:
        cfg = NetConfig(**json.loads(meta["config"]))
        scale = int(cfg.scale)
    except (KeyError, TypeError, ValueError) as e:
        raise WeightsError(f"{path}: bad architecture metadata ({e})") from None
    if scale not in SCALES:
        raise WeightsError(f"{path}: unsupported scale {scale}")
    return ModelDescriptor(cfg, path.stem, path, meta)


def _describe_external(path: Path) -> ModelDescriptor:
    from .external import describe_external
    from .external.files import ModelFileError

    try:
        return describe_external(path)
    except ModelFileError as e:
        raise WeightsError(str(e)) from None


def loaded(desc: ModelDescriptor, map_location: str | torch.device = "cpu") -> ModelDescriptor:
    """``desc`` with its network (eval mode) read from its file; itself when it has one already."""
    if desc.net is not None:
        return desc
    if desc.path is None:
        raise WeightsError(f"{desc.name}: no weights file to load")
    if desc.arch is not None:
        from .external.describe import load_network
        from .external.files import ModelFileError

        try:
            return replace(desc, net=load_network(desc))
        except ModelFileError as e:
            raise WeightsError(str(e)) from None
    net, _ = load_weights(desc.path, map_location)
    return replace(desc, net=net)


def load_model(
    name_or_path: str | Path, map_location: str | torch.device = "cpu", weights_dir: str | Path | None = None
) -> ModelDescriptor:
    """A model's name in ``weights_dir`` (default: the shipped weights) or a .safetensors path ->
    its descriptor with the network loaded."""
    return loaded(describe(resolve_weights(str(name_or_path), weights_dir)), map_location)


def find_models(
    model: str | Path, weights_dir: str | Path | None = None
) -> tuple[str, dict[int, ModelDescriptor]]:
    """(name, {scale: descriptor}) for a weights file, a full name in ``weights_dir`` ('asa-base-x2')
    or a family there ('asa-base': every <family>-x{2,3,4}.safetensors). Metadata only."""
    folder = weights_folder(weights_dir)
    found = model_files(model, folder, known=lambda: ", ".join(d.name for d in catalog(folder)))
    if isinstance(found, str):
        raise WeightsError(found)
    name, files = found
    if isinstance(files, Path):
        desc = describe(files)
        return name, {desc.scale: desc}
    described = {s: describe(p) for s, p in files.items()}
    for s, desc in described.items():
        if desc.scale != s:
            raise WeightsError(f"{desc.path}: file name says x{s} but its metadata says another scale")
    return name, described


def catalog(weights_dir: str | Path | None = None) -> list[ModelDescriptor]:
    """Every readable model file of a folder (default: the shipped weights), by file name."""
    folder = weights_folder(weights_dir)
    out = []
    for path in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        if not is_own_file(path):
            continue  # a catalog lists sr's models from metadata; other files load by path
        try:
            out.append(describe(path))
        except WeightsError:
            continue  # an unreadable file is not a model; loading it by name reports why
    return out


# -- network interpolation ---------------------------------------------------------------------
# Blended state dicts kept (CPU tensors, ~1.4 MB each for asa-base): a few strengths x 3 scales.
BLEND_CACHE_SIZE = 16


def blend_state_dicts(
    base: Mapping[str, torch.Tensor], other: Mapping[str, torch.Tensor], amount: float
) -> dict[str, torch.Tensor]:
    """Every tensor ``(1 - amount) * base + amount * other`` (same keys and shapes; amount in [0, 1]).

    Meaningful for two networks fine-tuned from the same weights (network interpolation, as in
    ESRGAN's). ``amount`` 0 and 1 return exact copies of ``base`` and ``other``; tensors that are not
    floating point (counters) must be equal in both and are copied.
    """
    if not (isinstance(amount, (int, float)) and math.isfinite(amount) and 0 <= amount <= 1):
        raise ValueError(f"blend amount must be a number in [0, 1], got {amount!r}")
    if base.keys() != other.keys():
        only = sorted(set(base) ^ set(other))
        raise ValueError(f"the two state dicts have different tensors ({', '.join(only[:5])})")
    out = {}
    for key, a in base.items():
        b = other[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ValueError(f"tensor {key}: {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
        if amount == 0 or not a.is_floating_point():
            if not a.is_floating_point() and not torch.equal(a, b):
                raise ValueError(f"tensor {key} is not floating point and differs between the two")
            out[key] = a.clone()
        elif amount == 1:
            out[key] = b.clone()
        else:
            out[key] = (1 - amount) * a + amount * b
    return out


# A cache key: a file's (file_key), or a blend's (base key, other key, amount), which nests.
StateKey = tuple


def _state(key: StateKey) -> Mapping[str, torch.Tensor]:
    """The tensors ``key`` names: a file's, read now, or a blend's (cached by :func:`blended_state`)."""
    if isinstance(key[0], tuple):
        return blended_state(*key)
    try:
        return load_file(key[0])
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise WeightsError(f"corrupt tensor data ({e})") from None


@lru_cache(maxsize=BLEND_CACHE_SIZE)
def blended_state(base: StateKey, other: StateKey, amount: float) -> dict:
    return blend_state_dicts(_state(base), _state(other), amount)


def _weights_file(model: str | Path | ModelDescriptor) -> ModelDescriptor:
    desc = model if isinstance(model, ModelDescriptor) else describe(resolve_weights(str(model)))
    if desc.path is None:
        raise WeightsError("blending needs weights files")
    return desc


def _check_amount(amount: object, label: str = "blend amount") -> float:
    if isinstance(amount, bool) or not (isinstance(amount, (int, float)) and math.isfinite(amount)
                                        and 0 <= amount <= 1):
        raise WeightsError(f"{label} must be a number in [0, 1], got {amount!r}")
    return float(amount)


def _blended(key: StateKey, files: list[ModelDescriptor], desc: ModelDescriptor,
             map_location: str | torch.device, name: str, meta: dict[str, str]) -> ModelDescriptor:
    """``desc`` renamed, with ``meta`` and a network holding the (cached) blend ``key`` of ``files``."""
    for other in files[1:]:
        if other.config.to_dict() != files[0].config.to_dict():
            raise WeightsError(f"cannot blend {files[0].name} and {other.name}: their architectures differ")
    paths = [str(f.path) for f in files]
    try:
        state = blended_state(*key)
    except WeightsError as e:
        raise WeightsError(f"{' / '.join(paths)}: {e}") from None
    except (OSError, ValueError) as e:
        raise WeightsError(f"cannot blend {' and '.join(paths)}: {e}") from None
    net = SRNet(desc.config)
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise WeightsError(f"{desc.path}: blended weights do not match the architecture: {e}") from None
    net = net.to(map_location).eval()
    return replace(desc, name=name, meta={**desc.meta, **meta}, net=net)


def load_blend(
    base: str | Path | ModelDescriptor,
    other: str | Path | ModelDescriptor,
    amount: float,
    map_location: str | torch.device = "cpu",
    name: str | None = None,
) -> ModelDescriptor:
    """``other``'s descriptor with a network whose every tensor is (1 - amount) * base + amount * other.

    Both must be weights files of one architecture (same config metadata). The blended state dict is
    cached per (files, amount), so each strength of each scale is computed once; every call builds
    its own network from it. ``name`` defaults to "<other>@<amount>".
    """
    a, b = _weights_file(base), _weights_file(other)
    if a.config.to_dict() != b.config.to_dict():
        raise WeightsError(f"cannot blend {a.name} and {b.name}: their architectures differ")
    amount = _check_amount(amount)
    meta = {"blend": json.dumps({"base": a.name, "other": b.name, "amount": amount})}
    return _blended((file_key(a.path), file_key(b.path), amount), [a, b], b, map_location,
                    name or f"{b.name}@{amount:g}", meta)


def load_look(
    photo: str | Path | ModelDescriptor,
    natural: str | Path | ModelDescriptor,
    look: float,
    base: str | Path | ModelDescriptor | None = None,
    denoise: float = 1.0,
    map_location: str | torch.device = "cpu",
    name: str | None = None,
) -> ModelDescriptor:
    """``photo``'s descriptor with a network whose every tensor is (1 - look) * photo + look * natural
    (``--look``); with ``base`` and ``denoise`` < 1, (1 - denoise) * base + denoise * that (``--look``
    with ``--denoise``: the look is applied to photo first, then blended with the default family).

    All of one architecture. Cached as :func:`load_blend`'s blends: photo's look per (files, look),
    the denoised one per (files, look, denoise). ``name`` defaults to "<photo>@look=<look>".
    """
    p, n = _weights_file(photo), _weights_file(natural)
    look = _check_amount(look, "look")
    files = [p, n]
    key: StateKey = (file_key(p.path), file_key(n.path), look)
    meta = {"look": json.dumps({"base": p.name, "other": n.name, "amount": look})}
    if base is not None and _check_amount(denoise, "denoise") != 1:
        d = _weights_file(base)
        files.insert(0, d)
        key = (file_key(d.path), key, float(denoise))
        meta["blend"] = json.dumps({"base": d.name, "other": p.name, "amount": float(denoise)})
    return _blended(key, files, p, map_location, name or f"{p.name}@look={look:g}", meta)
