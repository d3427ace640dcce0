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
from sr.descriptor import family_of
from sr.request import DEFAULT_DENOISE, DEFAULT_LOOK, takes_denoise, takes_look

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


class UnknownModelError(LookupError):
    pass


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
        offered = sorted([*families, *(f"{f}-x{s}" for f, scales in families.items() for s in scales)])
        raise UnknownModelError(f"unknown model {name!r}; available: {', '.join(offered) or 'none'}")

    def request_model(self, family: str) -> str:
        """The model a request for ``family`` names: the family, or for a served weights file its
        file name (which, like any weights file, takes no denoise strength)."""
        own_file = self._default_file is not None and family == self.default
        return self._default_file.name if own_file else family

    def takes_denoise(self, family: str) -> bool:
        """Whether ``family`` accepts a denoise strength (photo and auto; not a served weights file)."""
        return takes_denoise(self.request_model(family))

    def takes_look(self, family: str) -> bool:
        """Whether ``family`` accepts a look: photo and auto (not a served weights file), when the
        folder holds photo-natural, the far end of the blend."""
        return takes_look(self.request_model(family)) and NATURAL_MODEL in self.families()

    # --- engines ---------------------------------------------------------------------------
    def engine(self, family: str, denoise: float | None = None, look: float | None = None) -> Upscaler:
        """The Upscaler for ``family`` at ``denoise`` and ``look`` (a validated request's: photo and
        auto only; the engine refuses them for other families), built once; the engine itself loads
        weights lazily, thread-safe."""
        strength = DEFAULT_DENOISE if denoise is None and self.takes_denoise(family) else denoise
        texture = DEFAULT_LOOK if look is None and takes_look(self.request_model(family)) else look
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

    def _build(self, family: str, denoise: float | None, look: float | None) -> Upscaler:
        from sr.inference import Upscaler

        s = self.settings
        own_file = self._default_file is not None and family == self.default
        source = str(self._default_file) if own_file else family
        return Upscaler(model=source, device=s.device, tile=s.tile, weights_dir=s.weights_dir,
                        threads=s.engine_threads, denoise=denoise, look=look, precision=s.precision)

    def load_default(self, calibrate: Callable[[Upscaler], None] | None = None) -> None:
        """Build the default engine and run a tiny image through every scale (loads and warms them);
        then ``calibrate(engine)`` (with preload), before the hub says ready."""
        try:
            if self.default not in self.families():
                raise UnknownModelError(
                    f"model {self.settings.model!r} not found in the weights folder "
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
        up = self._engines.get(self.default)
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
