"""The :class:`~sr.descriptor.ModelDescriptor` of a model file of another architecture.

spandrel recognises the architecture and its hyper-parameters from the state dict alone, so
describing such a file reads its tensors (:mod:`sr.external.files`, safely) and builds the network
once; the result is cached per file (path, size, modification time), and each engine that loads the
model gets its own copy (:func:`load_network`), so one engine's bf16 cast never reaches another's.
"""

from __future__ import annotations

import copy
import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..cache import file_key
from ..descriptor import ArchInfo, ModelDescriptor
from ..shipped import MODEL_SUFFIXES
from .files import ModelFileError, read_state_dict
from .network import ExternalNet

# sr-asa is not on the public index: the extra comes from a checkout or a wheel, or spandrel by itself
EXTRA_HINT = 'pip install spandrel (the "models" extra: pip install ".[models]" in a checkout)'
# Recognised models kept in memory (fp32, CPU), by file: the service's models-dir cache and the
# engines hold their own copies, so this only saves re-reading a file described twice (the CLI's
# checks, then its engine). At most CACHE_SIZE files and CACHE_BYTES of parameters (the newest is kept
# whatever its size): a service reading a folder of large models keeps little beside its own cap.
CACHE_SIZE = 4
CACHE_BYTES = 256 * 2**20
_cache: OrderedDict[tuple[str, int, int], tuple[ArchInfo, Any]] = OrderedDict()
_cache_lock = threading.Lock()


def is_model_file(path: str | Path) -> bool:
    """Whether ``path`` has a suffix of a model file sr reads (the file need not exist)."""
    return Path(path).suffix.lower() in MODEL_SUFFIXES


def _not_own(path: Path) -> str:
    """What to say first of a file that is not one of sr's own: a .safetensors may be meant as one."""
    return "not sr's weights (no sr-weights metadata); " if path.suffix.lower() == ".safetensors" else ""


def _spandrel(path: Path) -> Any:
    try:
        import spandrel
    except ImportError as e:
        raise ModelFileError(f"{path}: {_not_own(path)}reading models of other architectures needs "
                             f"spandrel, which is not installed ({e}): {EXTRA_HINT}") from None
    return spandrel


def _tiling(spandrel: Any, tiling: Any) -> str:
    return {spandrel.ModelTiling.DISCOURAGED: "discouraged",
            spandrel.ModelTiling.INTERNAL: "internal"}.get(tiling, "supported")


def _feature_channels(model: Any) -> int:
    widths = [p.shape[0] for p in model.parameters() if p.ndim >= 2]
    return int(max(widths)) if widths else 3


def _window(model: Any) -> int:
    """The attention window ``model`` partitions its input into (its ``window_size``: an int, or one
    per side), 1 without one."""
    size = getattr(model, "window_size", None)
    sides = tuple(size) if isinstance(size, (tuple, list)) else (size,)
    if all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sides):
        return math.lcm(*sides)
    return 1


def _recognise(path: Path) -> tuple[ArchInfo, Any]:
    spandrel = _spandrel(path)
    state = read_state_dict(path)
    try:
        state = spandrel.canonicalize_state_dict(state)
        found = spandrel.ModelLoader(device="cpu").load_from_state_dict(state)
    except spandrel.UnsupportedModelError:
        known = len(spandrel.MAIN_REGISTRY.architectures())
        raise ModelFileError(f"{path}: {_not_own(path)}not a model architecture spandrel knows (its keys "
                             f"match none of {known} architectures)") from None
    except (RuntimeError, ValueError, KeyError, IndexError, TypeError, AssertionError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelFileError(f"{path}: spandrel could not load it ({reason})") from None
    if not isinstance(found, spandrel.ImageModelDescriptor):
        raise ModelFileError(f"{path}: a {found.architecture.name} model ({found.purpose}), not an "
                             "image-to-image model sr can run")
    req = found.size_requirements
    info = ArchInfo(
        architecture=found.architecture.name, scale=int(found.scale),
        input_channels=int(found.input_channels), output_channels=int(found.output_channels),
        params=sum(p.numel() for p in found.model.parameters()),
        feature_channels=_feature_channels(found.model),
        multiple_of=int(req.multiple_of), minimum=int(req.minimum), square=bool(req.square),
        bf16=bool(found.supports_bfloat16), fp16=bool(found.supports_half), purpose=str(found.purpose),
        tiling=_tiling(spandrel, found.tiling), tags=tuple(found.tags), window=_window(found.model),
    )
    found.model.eval().requires_grad_(False)
    return info, found


def _recognised(path: Path) -> tuple[ArchInfo, Any]:
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    key = file_key(path)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    found = _recognise(path)  # outside the lock: seconds for a large file
    with _cache_lock:
        _cache[key] = found
        while len(_cache) > CACHE_SIZE or (len(_cache) > 1 and _cached_bytes() > CACHE_BYTES):
            _cache.popitem(last=False)
    return found


def _cached_bytes() -> int:
    return sum(info.params * 4 for info, _ in _cache.values())  # fp32


def describe_external(path: str | Path) -> ModelDescriptor:
    """The descriptor of a model file spandrel recognises (``net`` None: :func:`load_network` builds
    it); ModelFileError saying why not (spandrel missing, file missing, unsafe, unknown, not an
    image model)."""
    path = Path(path)
    info, _ = _recognised(path)
    return ModelDescriptor(None, path.stem, path, {}, arch=info)


def load_network(desc: ModelDescriptor) -> ExternalNet:
    """A fresh :class:`ExternalNet` of ``desc``'s file (fp32, CPU, eval mode), the engine's own copy."""
    if desc.path is None or desc.arch is None:
        raise ModelFileError(f"{desc.name}: not a model file of another architecture")
    _, found = _recognised(Path(desc.path))
    return ExternalNet(copy.deepcopy(found)).eval()
