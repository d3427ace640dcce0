"""The models folder (``SR_MODELS_DIR``, ``sr serve --models-dir``): every model file in it, sr's own
or one spandrel recognises (:mod:`sr.external`), offered by its file stem: an upscaling model as a
family (``model=STEM``), a 1x restoration model as a ``pre=STEM`` choice.

The folder is read once (:func:`scan_models_dir`, by :meth:`sr.service.catalog.ModelCatalog.folder`):
a file that cannot be read is skipped with one log line, a stem the weights folder already answers
to is skipped, and without spandrel only sr's own files are offered (one log line names the extra).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from sr.descriptor import ModelDescriptor
from sr.shipped import MODEL_SUFFIXES

log = logging.getLogger("sr.service")

# Bytes per parameter an engine is counted at: fp32, what every model is loaded in (a bf16 engine
# holds half that once it has cast its copy).
PARAM_BYTES = 4
# sr-asa is not on the public index: spandrel itself, or the extra from a checkout or a wheel
EXTRA_HINT = 'pip install spandrel (the "models" extra)'


@dataclass(frozen=True)
class ModelsFolder:
    """The models folder's usable files, as read once: {stem: descriptor (metadata only)}."""

    models: dict[str, ModelDescriptor] = field(default_factory=dict)

    def get(self, name: str | None) -> ModelDescriptor | None:
        return self.models.get(name) if name is not None else None

    def pre_names(self) -> list[str]:
        """The names ``pre=`` takes: the 1x restoration models."""
        return [n for n, d in self.models.items() if d.purpose == "restore"]

    def upscaler_names(self) -> list[str]:
        """The names ``model=`` takes from the folder: the upscaling models."""
        return [n for n, d in self.models.items() if d.purpose == "upscale"]

    def pre_list(self) -> list[dict[str, object]]:
        """What GET /v1/models says of each ``pre`` choice."""
        return [dir_entry(self.models[n]) for n in self.pre_names()]


def dir_summary(desc: ModelDescriptor) -> dict[str, object]:
    """What a models-folder file is, as GET /v1/models says it."""
    return {"architecture": desc.architecture, "purpose": desc.purpose, "params": desc.params,
            "bf16": desc.supports_bf16, "input_channels": desc.input_channels, "tiling": desc.tiling,
            "size_requirements": desc.size_requirements}


def dir_entry(desc: ModelDescriptor) -> dict[str, object]:
    """A models-folder file's entry in GET /v1/models' "models" (its name is its stem)."""
    return {"name": desc.name, "family": desc.name, "scale": desc.scale, **dir_summary(desc),
            "source": "models_dir"}


def scan_models_dir(folder: Path, taken: set[str], cap: int) -> dict[str, ModelDescriptor]:
    """{stem: descriptor} of ``folder``'s model files that can be offered: each other file with a
    model suffix is skipped with one log line saying why (unreadable, not a model spandrel knows, a
    name the weights folder answers to, over the memory cap); without spandrel, one line names the
    extra and only sr's own files are read."""
    from sr.weights import WeightsError, describe, is_own_file

    if not folder.is_dir():
        log.warning("models folder %s not found: no models offered from it", folder)
        return {}
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in MODEL_SUFFIXES and p.is_file())
    try:
        import spandrel  # noqa: F401 - only whether it imports
        spandrel_error = None
    except Exception as e:  # noqa: BLE001 - missing, or a torchvision that does not match torch
        spandrel_error = f"{type(e).__name__}: {e}"
    found: dict[str, ModelDescriptor] = {}
    others = []
    for path in files:
        name = path.stem
        if name in taken or name in found:
            log.warning("models folder: %s skipped: the name %r is taken (weights folder, auto, or another "
                        "file of the models folder)", path.name, name)
            continue
        if spandrel_error is not None and not is_own_file(path):
            others.append(path.name)
            continue
        try:
            desc = describe(path)
        except WeightsError as e:
            log.warning("models folder: %s skipped: %s", path.name, e)
            continue
        if desc.params * PARAM_BYTES > cap:
            log.warning("models folder: %s skipped: its %d MB of parameters are over the model memory of "
                        "%d MB (SR_MODELS_MEMORY_MB)", path.name, desc.params * PARAM_BYTES // 2**20,
                        cap // 2**20)
            continue
        found[name] = desc
    if others:
        log.warning("models folder: spandrel is not usable (%s): %s; offering sr's own models only, %d other "
                    "files not offered (%s)", spandrel_error, EXTRA_HINT, len(others), ", ".join(others))
    log.info("models folder %s: %d models offered (%s)", folder, len(found), ", ".join(found) or "none")
    return found
