"""A model file's tensors, read without running anything the file contains.

``.safetensors`` holds tensors only. ``.pth``, ``.pt`` and ``.ckpt`` are pickles, which can name any
Python callable to be called while loading; they are read with ``torch.load(weights_only=True)``,
whose unpickler builds tensors and plain containers and refuses every other global before calling it.
TorchScript archives carry code that runs when loaded and are refused outright.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch

from ..shipped import MODEL_SUFFIXES

PICKLE_SUFFIXES = tuple(s for s in MODEL_SUFFIXES if s != ".safetensors")
# Keys that training scripts wrap a state dict in (BasicSR: params_ema/params, Lightning:
# state_dict, others: model/net_g); the first present that holds tensors is the model.
WRAPPER_KEYS = ("params_ema", "params", "state_dict", "model", "net_g", "generator", "gen")


class ModelFileError(ValueError):
    """A model file that cannot be read as tensors: missing, unsafe, corrupt, or of no known kind."""


def _is_torchscript(path: Path) -> bool:
    # TorchScript archives are zip files with the model's Python code under <name>/code/ and its
    # constants in constants.pkl; a plain torch.save zip has neither.
    try:
        with zipfile.ZipFile(path) as z:
            return any("/code/" in n or n.endswith("constants.pkl") for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _unwrap(obj: object, path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a loaded pickle: a state dict itself, or one inside a training wrapper."""
    if isinstance(obj, Mapping):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return {str(k): v for k, v in obj.items()}
        for key in WRAPPER_KEYS:
            inner = obj.get(key)
            if isinstance(inner, Mapping) and inner:
                return _unwrap(inner, path)
        tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if tensors:
            return tensors
    raise ModelFileError(f"{path}: holds no state dict (no tensors at the top or under "
                         f"{', '.join(WRAPPER_KEYS)})")


def _unpickler_reason(e: pickle.UnpicklingError) -> str:
    """The line of torch's message after 'WeightsUnpickler error:' (e.g. 'Unsupported operand 103'
    for bytes that are no pickle at all), colour codes stripped."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    after = text.split("WeightsUnpickler error:", 1)[-1]
    lines = [line.strip() for line in after.splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def _refused_global(e: pickle.UnpicklingError) -> str:
    """What torch's restricted unpickler refused, in one line. Its message is several paragraphs of
    advice (with terminal colour codes, and the advice to allow the global); the line that names the
    global reads 'WeightsUnpickler error: Unsupported global: GLOBAL eval was not an allowed global by
    default. Please use ...' or 'Trying to load unsupported GLOBAL posix.system whose module posix is
    blocked.'"""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(e).splitlines()]
    lines = [line for line in lines if line]
    named = next((line for line in lines if "GLOBAL " in line), None)
    if named is None:
        return lines[0] if lines else type(e).__name__
    return named.split("WeightsUnpickler error:")[-1].strip().split(". ")[0].rstrip(".")


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a model file (on the CPU), read safely; ModelFileError saying why not."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise ModelFileError(f"{path}: not a readable safetensors file ({e})") from None
    if suffix not in PICKLE_SUFFIXES:
        raise ModelFileError(f"{path}: not a model file sr reads (it reads {', '.join(MODEL_SUFFIXES)})")
    if _is_torchscript(path):
        raise ModelFileError(f"{path}: a TorchScript file, which runs its own code when loaded: refused "
                             "(export the model's state dict as .safetensors or .pth)")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "GLOBAL" not in str(e):  # no global asked for: the bytes are not a pickle torch can read
            raise ModelFileError(f"{path}: not a readable PyTorch file ({_unpickler_reason(e)})") from None
        raise ModelFileError(f"{path}: refused: the file asks to run code while loading, and only tensors "
                             f"and plain containers are loaded ({_refused_global(e)})") from None
    except (RuntimeError, OSError, EOFError, ValueError, AttributeError, ImportError) as e:
        raise ModelFileError(f"{path}: not a readable PyTorch file ({type(e).__name__}: "
                             f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})") from None
    return _unwrap(obj, path)
