"""The models the service offers: one engine (:class:`sr.inference.Upscaler`) per model family.

The configured default family is loaded and warmed once, at start-up, in a background thread
(``/readyz`` answers 503 until it is done). Other families found in the weights folder are built on
first use. A client names a model only by a catalogue name, never by a path.

``auto`` is offered as one more family when the folder holds both of its sides (the default family
and the photo family: :mod:`sr.inference.model_choice`), at their common scales. A ``denoise``
strength or a ``look`` other than the default gets its own engine per (family, denoise, look) (photo
blended with the default family, with photo-natural); the most recently used
:data:`MAX_DENOISE_ENGINES` of those are kept. Whether a family takes a denoise strength or a look
is the request's rule (:func:`sr.request.takes_denoise`, :func:`sr.request.takes_look`, applied by
:meth:`sr.request.UpscaleRequest.validate` to :meth:`ModelHub.request_model`'s name); a look also
needs photo-natural in the weights folder (:meth:`ModelHub.takes_look`).

A models folder (``SR_MODELS_DIR``, ``sr serve --models-dir``) adds every model file in it, sr's own
or one spandrel recognises (:mod:`sr.external`), by its file stem: an upscaling model as a family
(``model=STEM``), a 1x restoration model as a ``pre=STEM`` choice. The folder is read once, before
the hub says ready: a file that cannot be read is skipped with one log line, a stem the weights
folder already answers to is skipped, and without spandrel only sr's own files are offered (one log
line names the extra). Their engines (and every engine with a ``pre`` model) are built on first use
and kept least-recently-used within ``SR_MODELS_MEMORY_MB`` of parameter bytes
(:meth:`ModelHub.engine_bytes`); a running job keeps its engine until it ends.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sr import AUTO_MODEL, DEFAULT_MODEL, NATURAL_MODEL, NEAR_LOSSLESS_QUALITY, PHOTO_MODEL
from sr.descriptor import ModelDescriptor, family_of
from sr.request import DEFAULT_DENOISE, DEFAULT_LOOK, takes_denoise, takes_look
from sr.shipped import MODEL_SUFFIXES

from .settings import Settings

if TYPE_CHECKING:  # annotations only: the engine is imported when the first one is built
    from sr.inference import Upscaler

log = logging.getLogger("sr.service")

# Catalogue keys a client may see (a server-side file path is not one of them).
_HIDDEN_KEYS = {"path"}
# Engines kept for denoise strengths and looks other than the default (each holds its blended weights,
# ~1.4 MB per scale for asa-base): a client sweeping the sliders does not grow the server without bound.
MAX_DENOISE_ENGINES = 8
AUTO_DESCRIPTION = (f"per upload: {PHOTO_MODEL} for lossy files (JPEG or WebP below quality "
                    f"{NEAR_LOSSLESS_QUALITY}), {DEFAULT_MODEL} for the rest")


# Bytes per parameter an engine is counted at: fp32, what every model is loaded in (a bf16 engine
# holds half that once it has cast its copy).
PARAM_BYTES = 4
# sr-asa is not on the public index: spandrel itself, or the extra from a checkout or a wheel
EXTRA_HINT = 'pip install spandrel (the "models" extra)'


# A capped engine's key: (family, denoise, look, pre)
EngineKey = tuple[str, float | None, float | None, str | None]


class UnknownModelError(LookupError):
    pass


class ModelMemoryError(ValueError):
    """The asked model (with its pre model) needs more parameter memory than the server's cap."""


class ModelHub:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._engines: dict[str, Upscaler] = {}
        # (family, denoise, look) -> engine: LRU, bounded
        self._denoise_engines: OrderedDict[tuple[str, float | None, float | None], Upscaler] = OrderedDict()
        self.state = "loading"            # loading | ready | failed
        self.error: str | None = None
        self.loaded_event = threading.Event()
        model = Path(settings.model)
        self._default_file = model if settings.model.endswith(".safetensors") else None
        self.default = model.stem if self._default_file else settings.model
        self._catalog: list[dict[str, object]] | None = None
        # models folder: {stem: descriptor (metadata only)}, read once (dir_models); engines by
        # (family, denoise, look, pre) with their counted bytes, least recently used first
        self._dir_models: dict[str, ModelDescriptor] | None = None
        self._dir_lock = threading.Lock()
        self._capped: OrderedDict[EngineKey, tuple[Upscaler, int]] = OrderedDict()
        self.evictions = 0

    # --- catalogue -------------------------------------------------------------------------
    def catalog(self) -> list[dict[str, object]]:
        """Every model file offered, as ``list_models`` describes it (cached after the first read)."""
        if self._catalog is None:
            from sr.inference import list_models

            if self._default_file is not None:
                entries = [m for m in list_models(self._default_file.parent)
                           if _entry_stem(m) == self._default_file.stem]
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
        return [*self.catalog(), *(dir_entry(d) for d in self.dir_models().values())]

    # --- models folder ---------------------------------------------------------------------
    def dir_models(self) -> dict[str, ModelDescriptor]:
        """{stem: descriptor} of the models folder's usable files (read once; {} without a folder)."""
        if self._dir_models is None:
            with self._dir_lock:
                if self._dir_models is None:
                    folder = self.settings.models_dir
                    taken = {AUTO_MODEL, *self.families(),
                             *(f"{f}-x{s}" for f, scales in self.families().items() for s in scales)}
                    self._dir_models = ({} if folder is None else
                                        scan_models_dir(folder, taken, self.memory_cap))
        return self._dir_models

    def dir_model(self, name: str) -> ModelDescriptor | None:
        return self.dir_models().get(name)

    def pre_names(self) -> list[str]:
        """The names ``pre=`` takes: the models folder's 1x restoration models."""
        return [n for n, d in self.dir_models().items() if d.purpose == "restore"]

    def pre_list(self) -> list[dict[str, object]]:
        """What GET /v1/models says of each ``pre`` choice."""
        return [dir_entry(self.dir_models()[n]) for n in self.pre_names()]

    def resolve_pre(self, name: str | None) -> str | None:
        """A client's ``pre`` name -> the restoration model's stem (None: none asked);
        UnknownModelError naming the choices, ValueError for an upscaling model."""
        name = (name or "").strip()
        if not name:
            return None
        desc = self.dir_model(name)
        choices = ", ".join(self.pre_names()) or "none (no 1x restoration model in the models folder)"
        if desc is None:
            if name in self.families():
                raise ValueError(f"pre {name!r} is an upscaling model; pre takes a 1x restoration model: "
                                 f"{choices}")
            raise UnknownModelError(f"unknown pre model {name!r}; available: {choices}")
        if desc.purpose != "restore":
            raise ValueError(f"pre {name!r} is a x{desc.scale} upscaling model ({desc.architecture}); pre "
                             f"takes a 1x restoration model: {choices}")
        return name

    @property
    def memory_cap(self) -> int:
        return self.settings.models_memory_mb * 2**20

    def engine_bytes(self, family: str, pre: str | None = None) -> int:
        """What an engine is counted at against the cap: the fp32 bytes of its models' parameters
        (every scale of a family, and the pre model's)."""
        from sr.inference.model_choice import AUTO_SIDES

        desc = self.dir_model(family)
        if desc is not None:
            params = desc.params
        else:
            members = AUTO_SIDES if family == AUTO_MODEL else (family,)
            params = sum(int(m["params"] or 0) for m in self.catalog() if m["family"] in members)
        if pre is not None:
            params += self.dir_models()[pre].params
        return params * PARAM_BYTES

    def cost(self, family: str, pre: str | None = None) -> tuple[float, float]:
        """(the model's, the pre model's) network cost per output pixel relative to the default
        model's, which the work model is calibrated on: 1.0 for the weights folder's families (as
        before); for a models-folder file, parameters / scale^2 (a convolution's multiply-adds per
        output pixel) over the default model's at its smallest scale."""
        ref = self._reference_cost()
        def of(desc: ModelDescriptor | None) -> float:
            return 1.0 if desc is None or not ref else desc.params / desc.scale ** 2 / ref
        return of(self.dir_model(family)), (of(self.dir_model(pre)) if pre is not None else 0.0)

    def calibrated(self, family: str, pre: str | None = None) -> bool:
        """Whether the work model's units fit this engine's jobs, so that their times may teach it:
        the weights folder's families and the default model, without a pre model (the others'
        work is :meth:`cost`'s estimate)."""
        return pre is None and (family == self.default or self.dir_model(family) is None)

    def _reference_cost(self) -> float | None:
        desc = self.dir_model(self.default)
        if desc is not None:
            return desc.params / desc.scale ** 2
        family = DEFAULT_MODEL if self.default == AUTO_MODEL else self.default
        entries = sorted((int(m["scale"]), int(m["params"] or 0))
                         for m in self.catalog() if m["family"] == family)
        return entries[0][1] / entries[0][0] ** 2 if entries and entries[0][1] else None

    def budget_k_max(self, family: str) -> float | None:
        """The largest per-pixel attention budget the family's models allow: the heat map's top colour
        (each model's ``k_max`` as its descriptor states it; auto: both of its sides')."""
        from sr.inference.model_choice import AUTO_SIDES

        members = AUTO_SIDES if family == AUTO_MODEL else (family,)
        values = [m["k_max"] for m in self.catalog() if m["family"] in members and m.get("k_max")]
        return max(values) if values else None

    def families(self) -> dict[str, list[int]]:
        """{family: scales}, with auto when both of its sides are here (at their common scales:
        :func:`sr.inference.model_choice.auto_scales`)."""
        from sr.inference.model_choice import auto_scales

        out: dict[str, list[int]] = {}
        for m in self.catalog():
            out.setdefault(str(m["family"]), []).append(int(m["scale"]))
        found = {k: sorted(set(v)) for k, v in sorted(out.items())}
        common = auto_scales(found) if self._default_file is None else []
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
        for name, desc in self.dir_models().items():
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
        desc = self.dir_model(name)
        if desc is not None and desc.purpose != "upscale":
            raise ValueError(f"model {name!r} is a 1x restoration model ({desc.architecture}): pass it "
                             "as pre= with an upscaling model")
        if desc is not None:
            return name, None
        upscalers = [n for n, d in self.dir_models().items() if d.purpose == "upscale"]
        offered = sorted([*families, *(f"{f}-x{s}" for f, scales in families.items() for s in scales),
                          *upscalers])
        raise UnknownModelError(f"unknown model {name!r}; available: {', '.join(offered) or 'none'}")

    def request_model(self, family: str) -> str:
        """The model a request for ``family`` names: the family, or for a served weights file its
        file name (which, like any weights file, takes no denoise strength)."""
        own_file = self._default_file is not None and family == self.default
        if own_file:
            return self._default_file.name
        desc = self.dir_model(family) if family not in self.families() else None
        return desc.path.name if desc is not None and desc.path is not None else family

    def takes_denoise(self, family: str) -> bool:
        """Whether ``family`` accepts a denoise strength (photo and auto; not a served weights file)."""
        return takes_denoise(self.request_model(family))

    def takes_look(self, family: str) -> bool:
        """Whether ``family`` accepts a look: photo and auto (not a served weights file), when the
        folder holds photo-natural, the far end of the blend."""
        return takes_look(self.request_model(family)) and NATURAL_MODEL in self.families()

    # --- engines ---------------------------------------------------------------------------
    def engine(self, family: str, denoise: float | None = None, look: float | None = None,
               pre: str | None = None) -> Upscaler:
        """The Upscaler for ``family`` at ``denoise`` and ``look`` (a validated request's: photo and
        auto only; the engine refuses them for other families) with the ``pre`` model before it,
        built once; the engine itself loads weights lazily, thread-safe."""
        strength = DEFAULT_DENOISE if denoise is None and self.takes_denoise(family) else denoise
        texture = DEFAULT_LOOK if look is None and takes_look(self.request_model(family)) else look
        if pre is not None or (family not in self.families() and self.dir_model(family) is not None):
            return self._capped_engine(family, strength, texture, pre)
        with self._lock:
            if (strength is not None and strength != DEFAULT_DENOISE) or (texture is not None
                                                                          and texture != DEFAULT_LOOK):
                key = (family, strength, texture)
                up = self._denoise_engines.get(key)
                if up is None:
                    up = self._build(family, strength, texture)
                    self._denoise_engines[key] = up
                    while len(self._denoise_engines) > MAX_DENOISE_ENGINES:
                        self._denoise_engines.popitem(last=False)  # a running job keeps its own reference
                self._denoise_engines.move_to_end(key)
                return up
            up = self._engines.get(family)
            if up is None:
                up = self._build(family, None, None)
                self._engines[family] = up
            return up

    def _capped_engine(self, family: str, denoise: float | None, look: float | None,
                       pre: str | None) -> Upscaler:
        """A models-folder engine (or one with a pre model): built on first use, kept while the
        engines' counted bytes stay within the cap, the least recently used dropped first."""
        key = (family, denoise, look, pre)
        with self._lock:
            hit = self._capped.get(key)
            if hit is not None:
                self._capped.move_to_end(key)
                return hit[0]
            need, cap = self.engine_bytes(family, pre), self.memory_cap
            what = f"model {family}" + (f" with pre {pre}" if pre else "")
            if need > cap:
                raise ModelMemoryError(f"{what} needs {need / 2**20:.1f} MB of parameters, over this "
                                       f"server's model memory of {cap / 2**20:g} MB (SR_MODELS_MEMORY_MB)")
            up = self._build(family, denoise, look, pre)
            while self._capped and self.capped_bytes + need > cap:
                (old, _, _, old_pre), _ = self._capped.popitem(last=False)  # a running job keeps its own
                self.evictions += 1
                log.info("model %s%s unloaded: least recently used, %d MB cap (SR_MODELS_MEMORY_MB)", old,
                         f" (pre {old_pre})" if old_pre else "", cap // 2**20)
            self._capped[key] = (up, need)
            return up

    @property
    def capped_bytes(self) -> int:
        """The counted bytes of the models-folder engines held now."""
        return sum(n for _, n in self._capped.values())

    def held(self) -> list[str]:
        """The models-folder engines held now, least recently used first: 'model' or 'model+pre'."""
        with self._lock:
            return [f + (f"+{p}" if p else "") for f, _, _, p in self._capped]

    def _build(self, family: str, denoise: float | None, look: float | None,
               pre: str | None = None) -> Upscaler:
        from sr.inference import Upscaler

        s = self.settings
        own_file = self._default_file is not None and family == self.default
        desc = self.dir_model(family) if family not in self.families() else None
        source: str | ModelDescriptor = desc if desc is not None else (
            str(self._default_file) if own_file else family)
        return Upscaler(model=source, device=s.device, tile=s.tile, weights_dir=s.weights_dir,
                        threads=s.engine_threads, denoise=denoise, look=look, precision=s.precision,
                        pre=self.dir_models()[pre] if pre is not None else None)

    def load_default(self, calibrate: Callable[[Upscaler], None] | None = None) -> None:
        """Build the default engine and run a tiny image through every scale (loads and warms them);
        then ``calibrate(engine)`` (with preload), before the hub says ready."""
        try:
            self.dir_models()  # the models folder, read before the hub says ready
            if self.default not in self.families() and self.default not in self.dir_models():
                where = "weights folder" + (" or the models folder" if self.settings.models_dir else "")
                raise UnknownModelError(
                    f"model {self.settings.model!r} not found in the {where} "
                    f"(available: {', '.join(self.families()) or 'none'})")
            up = self.engine(self.default)
            if self.settings.preload:
                up.load()  # every scale (auto: both of its sides)
                from sr.io import DecodedImage

                tiny = DecodedImage(pixels=np.full((16, 16, 3), 0.5, np.float32), alpha=None, bit_depth=8,
                                    icc_profile=None, format="PNG", mode="RGB")
                for scale in up.scales:
                    up.upscale(tiny, scale=scale)
                if calibrate is not None:
                    calibrate(up)
            self.state = "ready"
            log.info("model %s ready on %s (scales %s)", self.default, up.device, up.scales)
        except Exception as e:  # noqa: BLE001 - any failure is reported by /readyz, not raised
            self.state, self.error = "failed", f"{type(e).__name__}: {e}"
            log.error("model %s failed to load: %s", self.default, self.error)
        finally:
            self.loaded_event.set()

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"model": self.default, "state": self.state}
        with self._lock:
            up = self._engines.get(self.default) or next(
                (u for (f, _, _, p), (u, _) in self._capped.items() if f == self.default and p is None), None)
        if up is not None and self.ready:
            out.update(device=str(up.device), scales=list(up.scales))
        if self.error:
            out["error"] = self.error
        return out


def _entry_stem(entry: dict[str, Any]) -> str:
    return Path(str(entry["path"])).stem if entry.get("path") else str(entry.get("name", ""))


def _plain(value: object) -> object:
    """JSON-friendly: paths and numpy scalars become str / Python numbers."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


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
