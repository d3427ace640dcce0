"""The service's engines (:class:`sr.inference.Upscaler`), one per model family, and the default
model's readiness: :class:`ModelHub`, over the :class:`~sr.service.catalog.ModelCatalog` of the
models offered.

The default family is loaded and warmed once, at start-up, in the background (``/readyz`` answers
503 until it is done: :meth:`sr.service.core.Service.start`). Other families are built on first use.
A ``denoise`` strength or a ``look`` other than the default gets its own engine per (family,
denoise, look) (photo blended with the default family, with photo-natural); the most recently used
:data:`MAX_DENOISE_ENGINES` of those are kept. The models folder's engines (and every engine with a
``pre`` model) are built on first use and kept least-recently-used within ``SR_MODELS_MEMORY_MB`` of
parameter bytes (:meth:`~sr.service.catalog.ModelCatalog.engine_bytes`); a running job keeps its
engine until it ends.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from sr.descriptor import ModelDescriptor
from sr.request import DEFAULT_DENOISE, DEFAULT_LOOK, UpscaleRequest, takes_look

from .catalog import ModelCatalog, UnknownModelError
from .errors import InvalidRequestError, ModelUnavailableError
from .settings import Settings

if TYPE_CHECKING:  # annotations only: the engine is imported when the first one is built
    from sr.inference import Upscaler

log = logging.getLogger("sr.service")

# Engines kept for denoise strengths and looks other than the default (each holds its blended weights,
# ~1.4 MB per scale for asa-base): a client sweeping the sliders does not grow the server without bound.
MAX_DENOISE_ENGINES = 8

# A capped engine's key: (family, denoise, look, pre)
EngineKey = tuple[str, float | None, float | None, str | None]


class ModelMemoryError(ValueError):
    """The asked model (with its pre model) needs more parameter memory than the server's cap."""


class ModelHub:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.catalog = ModelCatalog(settings)
        self._lock = threading.Lock()
        self._engines: dict[str, Upscaler] = {}
        # (family, denoise, look) -> engine: LRU, bounded
        self._denoise_engines: OrderedDict[tuple[str, float | None, float | None], Upscaler] = OrderedDict()
        # models folder and pre models: (family, denoise, look, pre) -> (engine, its counted bytes),
        # least recently used first
        self._capped: OrderedDict[EngineKey, tuple[Upscaler, int]] = OrderedDict()
        self.evictions = 0
        self.state = "loading"            # loading | ready | failed
        self.error: str | None = None
        self.loaded_event = threading.Event()

    @property
    def default(self) -> str:
        """The default model's name (a family, or the served file's stem)."""
        return self.catalog.default

    def engine_for(self, family: str, request: UpscaleRequest) -> Upscaler:
        """The family's engine at the request's denoise strength, look and pre model;
        :class:`InvalidRequestError` past the models' memory cap, the engine's
        :class:`~sr.inference.UpscaleError` for a scale it (or, with a look, photo-natural) lacks (its
        words, as ``sr upscale`` says them), :class:`ModelUnavailableError` when a listed model's file
        is unusable (the server's fault, not the client's)."""
        from sr.inference import UpscaleError

        try:
            engine = self.engine(family, request.denoise, request.look, request.pre)
        except ModelMemoryError as e:
            raise InvalidRequestError(str(e)) from None
        except UpscaleError as e:
            raise ModelUnavailableError(f"model {family} is unavailable: {e}") from None
        if request.scale is not None:
            engine.check_scale(request.scale)  # before the upload is read, as the CLI checks it
        return engine

    def engine(self, family: str, denoise: float | None = None, look: float | None = None,
               pre: str | None = None) -> Upscaler:
        """The Upscaler for ``family`` at ``denoise`` and ``look`` (a validated request's: photo and
        auto only; the engine refuses them for other families) with the ``pre`` model before it,
        built once; the engine itself loads weights lazily, thread-safe."""
        catalog = self.catalog
        strength = DEFAULT_DENOISE if denoise is None and catalog.takes_denoise(family) else denoise
        texture = DEFAULT_LOOK if look is None and takes_look(catalog.request_model(family)) else look
        if pre is not None or (family not in catalog.families() and catalog.folder().get(family) is not None):
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
            need, cap = self.catalog.engine_bytes(family, pre), self.catalog.memory_cap
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

        s, catalog = self.settings, self.catalog
        own_file = catalog.default_file is not None and family == catalog.default
        desc = catalog.folder().get(family) if family not in catalog.families() else None
        source: str | ModelDescriptor = desc if desc is not None else (
            str(catalog.default_file) if own_file else family)
        return Upscaler(model=source, device=s.device, tile=s.tile, weights_dir=s.weights_dir,
                        threads=s.engine_threads, denoise=denoise, look=look, precision=s.precision,
                        pre=catalog.folder().models[pre] if pre is not None else None)

    def load_default(self) -> Upscaler:
        """The default engine, built; with preload, loaded and warmed: a tiny image through every
        scale. The models folder is read first, so that it is read before the hub says ready."""
        catalog = self.catalog
        folder = catalog.folder()
        if self.default not in catalog.families() and self.default not in folder.models:
            where = "weights folder" + (" or the models folder" if self.settings.models_dir else "")
            raise UnknownModelError(
                f"model {self.settings.model!r} not found in the {where} "
                f"(available: {', '.join(catalog.families()) or 'none'})")
        up = self.engine(self.default)
        if self.settings.preload:
            up.load()  # every scale (auto: both of its sides)
            from sr.io import DecodedImage

            tiny = DecodedImage(pixels=np.full((16, 16, 3), 0.5, np.float32), alpha=None, bit_depth=8,
                                icc_profile=None, format="PNG", mode="RGB")
            for scale in up.scales:
                up.upscale(tiny, scale=scale)
        return up

    def loaded(self, engine: Upscaler) -> None:
        """The default model is ready: requests are served."""
        self.state = "ready"
        log.info("model %s ready on %s (scales %s)", self.default, engine.device, engine.scales)
        self.loaded_event.set()

    def failed(self, error: Exception) -> None:
        """The default model failed to load: /readyz and every request say why."""
        self.state, self.error = "failed", f"{type(error).__name__}: {error}"
        log.error("model %s failed to load: %s", self.default, self.error)
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
