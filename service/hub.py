"""The models the service offers: one engine (:class:`sr.inference.Upscaler`) per model family.

The configured default family is loaded and warmed once, at start-up, in a background thread
(``/readyz`` answers 503 until it is done). Other families found in the weights folder are built on
first use. A client names a model only by a catalogue name, never by a path.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from sr.descriptor import family_of

from .settings import Settings

log = logging.getLogger("sr.service")

# Catalogue keys a client may see (a server-side file path is not one of them).
_HIDDEN_KEYS = {"path"}


class UnknownModelError(LookupError):
    pass


class ModelHub:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._engines: dict[str, Any] = {}
        self.state = "loading"            # loading | ready | failed
        self.error: str | None = None
        self.loaded_event = threading.Event()
        model = Path(settings.model)
        self._default_file = model if settings.model.endswith(".safetensors") else None
        self.default = model.stem if self._default_file else settings.model
        self._catalog: list[dict[str, Any]] | None = None

    # --- catalogue -------------------------------------------------------------------------
    def catalog(self) -> list[dict[str, Any]]:
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
        (each model's ``k_max`` as its descriptor states it)."""
        values = [m["k_max"] for m in self.catalog() if m["family"] == family and m.get("k_max")]
        return max(values) if values else None

    def families(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for m in self.catalog():
            out.setdefault(str(m["family"]), []).append(int(m["scale"]))
        return {k: sorted(set(v)) for k, v in sorted(out.items())}

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

    # --- engines ---------------------------------------------------------------------------
    def engine(self, family: str) -> Any:
        """The Upscaler for ``family`` (built once; the engine itself loads weights lazily, thread-safe)."""
        with self._lock:
            up = self._engines.get(family)
            if up is None:
                from sr.inference import Upscaler

                s = self.settings
                own_file = self._default_file is not None and family == self.default
                source = str(self._default_file) if own_file else family
                up = Upscaler(model=source, device=s.device, tile=s.tile, weights_dir=s.weights_dir,
                              threads=s.threads)
                self._engines[family] = up
            return up

    def load_default(self) -> None:
        """Build the default engine and run a tiny image through every scale (loads and warms them)."""
        try:
            if self.default not in self.families():
                raise UnknownModelError(
                    f"model {self.settings.model!r} not found in the weights folder "
                    f"(available: {', '.join(self.families()) or 'none'})")
            up = self.engine(self.default)
            if self.settings.preload:
                from sr.io import DecodedImage

                tiny = DecodedImage(pixels=np.full((16, 16, 3), 0.5, np.float32), alpha=None, bit_depth=8,
                                    icc_profile=None, format="PNG", mode="RGB")
                for scale in up.scales:
                    up.upscale(tiny, scale=scale)
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

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.default, "state": self.state}
        up = self._engines.get(self.default)
        if up is not None and self.ready:
            out.update(device=str(up.device), scales=list(up.scales))
        if self.error:
            out["error"] = self.error
        return out


def _entry_stem(entry: dict[str, Any]) -> str:
    return Path(str(entry["path"])).stem if entry.get("path") else str(entry.get("name", ""))


def _plain(value: Any) -> Any:
    """JSON-friendly: paths and numpy scalars become str / Python numbers."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    return value
