"""Budget maps as heat-map PNGs (:func:`heatmap_png`), and the maps of recent results kept for
``GET /v1/budget-maps/{id}`` (:class:`BudgetMapStore`), so that the page shows a result's map without
a second upscale."""

from __future__ import annotations

import io
import secrets
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    import numpy as np


class BudgetMapStore:
    """The budget maps of recent results, as heat-map levels (1 byte per input pixel). Bounded in
    bytes; the oldest go first; ids are unguessable, and the routes that use them need the API key
    anyway."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._maps: OrderedDict[str, tuple[np.ndarray, float | None]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, levels: np.ndarray, k_max: float | None) -> str | None:
        if levels.nbytes > self.max_bytes:
            return None
        key = secrets.token_urlsafe(16)
        with self._lock:
            self._maps[key] = (levels, k_max)
            self._bytes += levels.nbytes
            while self._bytes > self.max_bytes:
                _, (old, _) = self._maps.popitem(last=False)
                self._bytes -= old.nbytes
        return key

    def get(self, key: str) -> tuple[np.ndarray, float | None] | None:
        with self._lock:
            return self._maps.get(key)


def levels_png(levels: np.ndarray) -> bytes:
    """The heat-map PNG of kept levels: the same pixels as :func:`heatmap_png` of the map."""
    from PIL import Image

    from sr.inference.heatmap import LUT

    buf = io.BytesIO()
    Image.fromarray(LUT[levels], "RGB").save(buf, format="PNG")
    return buf.getvalue()


def heatmap_png(budget_map: np.ndarray, k_max: float | None = None) -> bytes:
    from PIL import Image

    from sr.inference import budget_heatmap

    buf = io.BytesIO()
    Image.fromarray(budget_heatmap(budget_map, k_max), "RGB").save(buf, format="PNG")
    return buf.getvalue()
