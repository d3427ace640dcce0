"""Where the shipped weights are, and whether a model name names any file: without torch.

:mod:`sr.weights` turns names into files (and imports torch, seconds on a loaded machine); this
module holds the part of its rule that needs no tensor library, so that ``sr upscale`` refuses an
unknown model or a missing weights file before the network's libraries load. What a file holds is
still :mod:`sr.weights`' to check.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from . import AUTO_MODEL

SCALES = (2, 3, 4)  # the scales a model family has files for; torch-free for the CLI's early checks
# Files a model is read from: sr's own .safetensors, and other architectures' files (sr.external).
MODEL_SUFFIXES = (".safetensors", ".pth", ".pt", ".ckpt")


def is_model_path(path: str | Path) -> bool:
    """Whether ``path`` names a model file by its suffix (it need not exist)."""
    return Path(str(path)).suffix.lower() in MODEL_SUFFIXES


def shipped_weights_dir() -> Path:
    """Where the shipped weights are: the checkout's weights/ (an editable install or a source tree),
    else the copy a wheel carries inside the package (sr/_weights, made by setup.py's build hook)."""
    package = Path(__file__).resolve().parent
    checkout = package.parent / "weights"
    if any(checkout.glob("*.safetensors")):
        return checkout
    return package / "_weights"


def weights_folder(weights_dir: str | Path | None = None) -> Path:
    """The folder model names are looked up in: ``weights_dir`` when given (``--weights-dir``), else
    :data:`sr.weights.WEIGHTS_DIR` once that module is loaded, else the shipped one."""
    if weights_dir is not None:
        return Path(weights_dir)
    loaded = sys.modules.get("sr.weights")
    return loaded.WEIGHTS_DIR if loaded is not None else shipped_weights_dir()


def unknown_model_message(text: str, folder: Path, known: str) -> str:
    return (f"unknown model {text!r}: no {text}-x{{2,3,4}}.safetensors in {folder} "
            f"(available: {known or 'none'}); pass a .safetensors path to use your own weights")


def model_files(
    model: str | Path, folder: Path, known: Callable[[], str] | None = None,
) -> tuple[str, Path | dict[int, Path]] | str:
    """The rule that turns a model into files, by name and path only (no file is opened): (name,
    path) for a weights file (``model`` itself, which may not exist) or a full name in ``folder``
    ('asa-base-x2'), (name, {scale: path}) for a family there ('asa-base'), else why nothing
    answers. ``known`` lists the folder's models for that message (default: its files' stems)."""
    text = str(model)
    as_path = Path(text).expanduser()
    if isinstance(model, Path) or is_model_path(text) or as_path.is_file():
        return as_path.stem, as_path
    if not text or "/" in text or "\\" in text:
        return f"unknown model {text!r}: not a weights file"
    single = folder / f"{text}.safetensors"
    if single.is_file():
        return text, single
    family = {s: folder / f"{text}-x{s}.safetensors" for s in SCALES}
    family = {s: path for s, path in family.items() if path.is_file()}
    if family:
        return text, family
    if known is None:
        listed = ", ".join(sorted(p.stem for p in folder.glob("*.safetensors"))) if folder.is_dir() else ""
    else:
        listed = known()
    return unknown_model_message(text, folder, listed)


def missing_model(model: str | Path, folder: str | Path | None = None) -> str | None:
    """Why no file answers to ``model`` (as :func:`sr.weights.find_models` would say it), or None
    when one may: ``auto``, an existing file, or a name with a file in ``folder`` (default:
    :func:`weights_folder`). Names and paths only; no file is opened."""
    if str(model) == AUTO_MODEL:
        return None
    found = model_files(model, weights_folder(folder))
    if isinstance(found, str):
        return found
    files = found[1]
    if isinstance(files, Path) and not files.is_file():
        return f"weights file not found: {files}"
    return None
