"""The models the service offers, by name: :class:`ModelCatalog`. Metadata only: no engine is built here
(engines: :mod:`sr.service.hub`).

The weights folder's files are grouped in families (``asa-base`` for ``asa-base-x2``, ``-x3``...); a
client names a model only by a catalogue name, never by a path. ``auto`` is offered as one more
family when the folder holds both of its sides (the default family and the photo family:
:mod:`sr.inference.model_choice`), at their common scales. Whether a family takes a denoise
strength or a look is the request's rule (:func:`sr.request.takes_denoise`,
:func:`sr.request.takes_look`, applied by :meth:`sr.request.UpscaleRequest.validate` to
:meth:`ModelCatalog.request_model`'s name); a look also needs photo-natural in the weights folder
(:meth:`ModelCatalog.takes_look`). The models folder adds its files by stem
(:mod:`sr.service.models_dir`).

The catalogue also says what each model costs: its parameter bytes against the models folder's
memory cap (:meth:`ModelCatalog.engine_bytes`) and its network cost relative to the default model,
on which the work model is calibrated (:meth:`ModelCatalog.cost`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from sr import AUTO_MODEL, DEFAULT_MODEL, NATURAL_MODEL, NEAR_LOSSLESS_QUALITY, PHOTO_MODEL
from sr.descriptor import ModelDescriptor, family_of
from sr.request import takes_denoise, takes_look

from .models_dir import PARAM_BYTES, ModelsFolder, dir_entry, dir_summary, scan_models_dir
from .settings import Settings

# Catalogue keys a client may see (a server-side file path is not one of them).
_HIDDEN_KEYS = {"path"}
AUTO_DESCRIPTION = (f"per upload: {PHOTO_MODEL} for lossy files (JPEG or WebP below quality "
                    f"{NEAR_LOSSLESS_QUALITY}), {DEFAULT_MODEL} for the rest")


class UnknownModelError(LookupError):
    pass


class ModelCatalog:
    """The weights folder's families (or the one served ``.safetensors`` file) and the models
    folder's files: their names, what GET /v1/models says of them, and their costs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        model = Path(settings.model)
        self.default_file = model if settings.model.endswith(".safetensors") else None
        self.default = model.stem if self.default_file else settings.model
        self._catalog: list[dict[str, object]] | None = None
        self._folder: ModelsFolder | None = None
        self._folder_lock = threading.Lock()

    @property
    def memory_cap(self) -> int:
        """Bytes of parameters the models folder's engines may hold (SR_MODELS_MEMORY_MB)."""
        return self.settings.models_memory_mb * 2**20

    def catalog(self) -> list[dict[str, object]]:
        """Every model file offered, as ``list_models`` describes it (cached after the first read)."""
        if self._catalog is None:
            from sr.inference import list_models

            if self.default_file is not None:
                entries = [m for m in list_models(self.default_file.parent)
                           if _entry_stem(m) == self.default_file.stem]
                for m in entries:
                    m["family"] = self.default  # one file: the name a client asks for is its stem
            else:
                entries = list_models(self.settings.weights_dir)
                for m in entries:
                    m["family"] = family_of(str(m["name"]))
            self._catalog = [{k: _plain(v) for k, v in m.items() if k not in _HIDDEN_KEYS} for m in entries]
        return self._catalog

    def model_list(self) -> list[dict[str, object]]:
        """What GET /v1/models lists under "models": the weights folder's files, then the models
        folder's (architecture, scale, purpose, params, bf16 support, ...)."""
        return [*self.catalog(), *(dir_entry(d) for d in self.folder().models.values())]

    def folder(self) -> ModelsFolder:
        """The models folder's usable files, read once (empty without a folder)."""
        if self._folder is None:
            with self._folder_lock:
                if self._folder is None:
                    where = self.settings.models_dir
                    families = self.families()
                    taken = {AUTO_MODEL, *families,
                             *(f"{f}-x{s}" for f, scales in families.items() for s in scales)}
                    self._folder = ModelsFolder({} if where is None else
                                                scan_models_dir(where, taken, self.memory_cap))
        return self._folder

    def families(self) -> dict[str, list[int]]:
        """{family: scales}, with auto when both of its sides are here (at their common scales:
        :func:`sr.inference.model_choice.auto_scales`)."""
        from sr.inference.model_choice import auto_scales

        out: dict[str, list[int]] = {}
        for m in self.catalog():
            out.setdefault(str(m["family"]), []).append(int(m["scale"]))
        found = {k: sorted(set(v)) for k, v in sorted(out.items())}
        common = auto_scales(found) if self.default_file is None else []
        if common:
            found[AUTO_MODEL] = common
        return found

    def family_list(self) -> list[dict[str, object]]:
        """What GET /v1/models says of each family: name, scales, default, whether it takes denoise
        and a look."""
        out = []
        for name, scales in self.families().items():
            entry: dict[str, object] = {"name": name, "scales": scales, "default": name == self.default,
                                     "denoise": self.takes_denoise(name), "look": self.takes_look(name)}
            if name == AUTO_MODEL:
                entry["description"] = AUTO_DESCRIPTION
            out.append(entry)
        for name, desc in self.folder().models.items():
            if desc.purpose == "upscale":
                out.append({"name": name, "scales": [desc.scale], "default": name == self.default,
                            "denoise": False, "look": False, **dir_summary(desc)})
        return out

    def resolve(self, name: str | None) -> tuple[str, int | None]:
        """A client's model name -> (family, scale the name implies or None)."""
        families = self.families()
        name = (name or "").strip() or self.default
        if name in families:
            return name, None
        family, sep, scale = name.rpartition("-x")
        if sep and family in families and scale.isdigit() and int(scale) in families[family]:
            return family, int(scale)
        desc = self.folder().get(name)
        if desc is not None and desc.purpose != "upscale":
            raise ValueError(f"model {name!r} is a 1x restoration model ({desc.architecture}): pass it "
                             "as pre= with an upscaling model")
        if desc is not None:
            return name, None
        offered = sorted([*families, *(f"{f}-x{s}" for f, scales in families.items() for s in scales),
                          *self.folder().upscaler_names()])
        raise UnknownModelError(f"unknown model {name!r}; available: {', '.join(offered) or 'none'}")

    def resolve_pre(self, name: str | None) -> str | None:
        """A client's ``pre`` name -> the restoration model's stem (None: none asked);
        UnknownModelError naming the choices, ValueError for an upscaling model."""
        name = (name or "").strip()
        if not name:
            return None
        folder = self.folder()
        desc = folder.get(name)
        choices = ", ".join(folder.pre_names()) or "none (no 1x restoration model in the models folder)"
        if desc is None:
            if name in self.families():
                raise ValueError(f"pre {name!r} is an upscaling model; pre takes a 1x restoration model: "
                                 f"{choices}")
            raise UnknownModelError(f"unknown pre model {name!r}; available: {choices}")
        if desc.purpose != "restore":
            raise ValueError(f"pre {name!r} is a x{desc.scale} upscaling model ({desc.architecture}); pre "
                             f"takes a 1x restoration model: {choices}")
        return name

    def request_model(self, family: str) -> str:
        """The model a request for ``family`` names: the family, or for a served weights file its
        file name (which, like any weights file, takes no denoise strength)."""
        if self.default_file is not None and family == self.default:
            return self.default_file.name
        desc = self.folder().get(family) if family not in self.families() else None
        return desc.path.name if desc is not None and desc.path is not None else family

    def takes_denoise(self, family: str) -> bool:
        """Whether ``family`` accepts a denoise strength (photo and auto; not a served weights file)."""
        return takes_denoise(self.request_model(family))

    def takes_look(self, family: str) -> bool:
        """Whether ``family`` accepts a look: photo and auto (not a served weights file), when the
        folder holds photo-natural, the far end of the blend."""
        return takes_look(self.request_model(family)) and NATURAL_MODEL in self.families()

    def budget_k_max(self, family: str) -> float | None:
        """The largest per-pixel attention budget the family's models allow: the heat map's top colour
        (each model's ``k_max`` as its descriptor states it; auto: both of its sides')."""
        from sr.inference.model_choice import AUTO_SIDES

        members = AUTO_SIDES if family == AUTO_MODEL else (family,)
        values = [m["k_max"] for m in self.catalog() if m["family"] in members and m.get("k_max")]
        return max(values) if values else None

    def engine_bytes(self, family: str, pre: str | None = None) -> int:
        """What an engine is counted at against the cap: the fp32 bytes of its models' parameters
        (every scale of a family, and the pre model's)."""
        from sr.inference.model_choice import AUTO_SIDES

        desc = self.folder().get(family)
        if desc is not None:
            params = desc.params
        else:
            members = AUTO_SIDES if family == AUTO_MODEL else (family,)
            params = sum(int(m["params"] or 0) for m in self.catalog() if m["family"] in members)
        if pre is not None:
            params += self.folder().models[pre].params
        return params * PARAM_BYTES

    def cost(self, family: str, pre: str | None = None) -> tuple[float, float]:
        """(the model's, the pre model's) network cost per output pixel relative to the default
        model's, which the work model is calibrated on: 1.0 for the weights folder's families (as
        before); for a models-folder file, parameters / scale^2 (a convolution's multiply-adds per
        output pixel) over the default model's at its smallest scale."""
        ref = self._reference_cost()
        def of(desc: ModelDescriptor | None) -> float:
            return 1.0 if desc is None or not ref else desc.params / desc.scale ** 2 / ref
        folder = self.folder()
        return of(folder.get(family)), (of(folder.get(pre)) if pre is not None else 0.0)

    def calibrated(self, family: str, pre: str | None = None) -> bool:
        """Whether the work model's units fit this engine's jobs, so that their times may teach it:
        the weights folder's families and the default model, without a pre model (the others'
        work is :meth:`cost`'s estimate)."""
        return pre is None and (family == self.default or self.folder().get(family) is None)

    def _reference_cost(self) -> float | None:
        desc = self.folder().get(self.default)
        if desc is not None:
            return desc.params / desc.scale ** 2
        family = DEFAULT_MODEL if self.default == AUTO_MODEL else self.default
        entries = sorted((int(m["scale"]), int(m["params"] or 0))
                         for m in self.catalog() if m["family"] == family)
        return entries[0][1] / entries[0][0] ** 2 if entries and entries[0][1] else None


def _entry_stem(entry: dict[str, Any]) -> str:
    return Path(str(entry["path"])).stem if entry.get("path") else str(entry.get("name", ""))


def _plain(value: object) -> object:
    """JSON-friendly: paths and numpy scalars become str / Python numbers."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    return value
