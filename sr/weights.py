"""Safetensors weights with metadata: export from training checkpoints, checked loading, lookup.

A shipped file holds the EMA weights (no pickle) and a metadata dict of strings: the architecture
config (JSON), preset, scale, params, training data and steps, validation PSNR/SSIM. Loading builds
the architecture from that metadata and checks every tensor, so a mismatched or corrupt file gives
one clear :class:`WeightsError`.

Names become files here and only here: :func:`describe` / :func:`load_model` give one model's
:class:`~sr.descriptor.ModelDescriptor`, :func:`find_models` a family's (one per scale) and
:func:`catalog` every model of a folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_save

from .descriptor import SCALES, ModelDescriptor
from .io import atomic_write
from .models import NetConfig, SRNet, count_params

FORMAT = "sr-weights-v1"


def shipped_weights_dir() -> Path:
    """Where the shipped weights are: the checkout's weights/ (an editable install or a source tree),
    else the copy a wheel carries inside the package (sr/_weights, made by setup.py's build hook)."""
    package = Path(__file__).resolve().parent
    checkout = package.parent / "weights"
    if any(checkout.glob("*.safetensors")):
        return checkout
    return package / "_weights"


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


def resolve_weights(name_or_path: str) -> Path:
    """A path to a .safetensors file, or the name of a shipped model (e.g. 'asa-base-x2')."""
    p = Path(name_or_path)
    if p.suffix == ".safetensors" or p.exists():
        if not p.is_file():
            raise WeightsError(f"weights file not found: {p}")
        return p
    shipped = WEIGHTS_DIR / f"{name_or_path}.safetensors"
    if shipped.is_file():
        return shipped
    known = ", ".join(sorted(f.stem for f in WEIGHTS_DIR.glob("*.safetensors"))) or "none"
    raise WeightsError(
        f"unknown model {name_or_path!r}: not a file and not a shipped model (shipped: {known})"
    )


def shipped_models() -> list[Path]:
    return sorted(WEIGHTS_DIR.glob("*.safetensors"))


def describe(path: str | Path) -> ModelDescriptor:
    """The descriptor of one weights file from its metadata alone (no tensor is read)."""
    path = Path(path)
    meta = read_metadata(path)
    try:
        cfg = NetConfig(**json.loads(meta["config"]))
        scale = int(cfg.scale)
    except (KeyError, TypeError, ValueError) as e:
        raise WeightsError(f"{path}: bad architecture metadata ({e})") from None
    if scale not in SCALES:
        raise WeightsError(f"{path}: unsupported scale {scale}")
    return ModelDescriptor(cfg, path.stem, path, meta)


def load_model(name_or_path: str | Path, map_location: str | torch.device = "cpu") -> ModelDescriptor:
    """A shipped model's name or a .safetensors path -> its descriptor with the network loaded."""
    return describe(resolve_weights(str(name_or_path))).load(map_location)


def find_models(
    model: str | Path, weights_dir: str | Path | None = None
) -> tuple[str, dict[int, ModelDescriptor]]:
    """(name, {scale: descriptor}) for a weights file, a full name in ``weights_dir`` ('asa-base-x2')
    or a family there ('asa-base': every <family>-x{2,3,4}.safetensors). Metadata only."""
    folder = Path(weights_dir) if weights_dir is not None else WEIGHTS_DIR
    text = str(model)
    as_path = Path(text).expanduser()
    if isinstance(model, Path) or text.endswith(".safetensors") or as_path.is_file():
        desc = describe(as_path)
        return as_path.stem, {desc.scale: desc}
    if not text or "/" in text or "\\" in text:
        raise WeightsError(f"unknown model {text!r}: not a weights file")
    single = folder / f"{text}.safetensors"
    if single.is_file():
        desc = describe(single)
        return text, {desc.scale: desc}
    family = {s: folder / f"{text}-x{s}.safetensors" for s in SCALES}
    family = {s: p for s, p in family.items() if p.is_file()}
    if not family:
        known = ", ".join(d.name for d in catalog(folder)) or "none"
        raise WeightsError(
            f"unknown model {text!r}: no {text}-x{{2,3,4}}.safetensors in {folder} "
            f"(available: {known}); pass a .safetensors path to use your own weights"
        )
    found = {s: describe(p) for s, p in family.items()}
    for s, desc in found.items():
        if desc.scale != s:
            raise WeightsError(f"{desc.path}: file name says x{s} but its metadata says another scale")
    return text, found


def catalog(weights_dir: str | Path | None = None) -> list[ModelDescriptor]:
    """Every readable model file of a folder (default: the shipped weights), by file name."""
    folder = Path(weights_dir) if weights_dir is not None else WEIGHTS_DIR
    out = []
    for path in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        try:
            out.append(describe(path))
        except WeightsError:
            continue  # an unreadable file is not a model; loading it by name reports why
    return out
