"""A family engine's networks: each loaded once per (scale, dtype), on first use, under a lock.

The dtype a network runs in depends on the input's size where auto's bf16 only pays on large inputs
(:func:`~sr.inference.precision.bf16_from_pixels`), so one scale may hold an fp32 and a bf16 copy.
Concurrent calls share the cache: the lock makes the first of them load and the others wait for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import torch

from ..descriptor import ModelDescriptor
from ..models import set_attention_path
from .family_weights import FamilyWeights, read_tensors
from .passes import Loaded
from .precision import bf16_from_pixels, choose_dtype, choose_external_dtype


class Networks:
    """Loads ``weights``' networks for ``device`` as the engine runs them: its dtype, memory format,
    attention path, and with ``compile`` torch.compile'd. ``shipped_dir``: the folder whose files the
    bf16 record measured (:func:`~sr.inference.precision.record_name`; default the package's own)."""

    def __init__(
        self, weights: FamilyWeights, device: torch.device, precision: str,
        memory_format: torch.memory_format, attention_path: str, compile: bool,
        shipped_dir: str | Path | None = None,
    ) -> None:
        self.weights = weights
        self.device = device
        self.precision = precision
        self.memory_format = memory_format
        self.attention_path = attention_path
        self.compile = compile
        self.shipped_dir = shipped_dir
        self._loaded: dict[tuple[int, torch.dtype], Loaded] = {}  # per (scale, dtype); scale 1: the pre model
        self._dtypes: dict[tuple[int, bool], torch.dtype] = {}  # per (scale, under bf16's start size)
        self._lock = threading.Lock()

    def precision_for(self, scale: int, pixels: int | None = None) -> tuple[torch.dtype, str]:
        """(dtype, why) for the ``scale`` network on an input of ``pixels`` (None: a large one)."""
        desc = self.weights.descriptors[scale]
        if not desc.own:  # another architecture: what spandrel and a check say
            return choose_external_dtype(desc, self.precision, self.device, pixels)
        return choose_dtype(self.precision, self.device, self.weights.record_names(scale, self.shipped_dir),
                            pixels)

    def dtype(self, scale: int, pixels: int | None) -> torch.dtype:
        """What ``scale`` runs in on a pass input of ``pixels`` (None: a large one), decided once per
        scale and size class (the device and precision are fixed)."""
        small = pixels is not None and self._bf16_too_small(pixels)
        dtype = self._dtypes.get((scale, small))
        if dtype is None:
            dtype = self._dtypes[(scale, small)] = self.precision_for(scale, 1 if small else None)[0]
        return dtype

    def _bf16_too_small(self, pixels: int) -> bool:
        """Whether an input of ``pixels`` is under the size from which auto's bf16 pays on this CPU."""
        if self.device.type != "cpu" or self.precision != "auto":
            return False
        return pixels < (bf16_from_pixels() or 0)

    def get(self, scale: int, pixels: int | None = None) -> Loaded:
        """The ``scale`` network loaded in the dtype an input of ``pixels`` runs in (None: a large one)."""
        dtype = self.dtype(scale, pixels)

        def load() -> Loaded:
            self.weights.check_look([scale])
            return self._load(self.weights.tensors(scale), dtype)

        return self._cached((scale, dtype), load)

    def pre(self) -> Loaded:
        """The pre model, loaded once, in fp32 or bf16 as its own precision check says."""
        desc = self.weights.pre
        assert desc is not None
        # find_pre takes 1x models only, and sr's own networks all upscale: always another architecture
        dtype = choose_external_dtype(desc, self.precision, self.device)[0]
        # upscaling models have scale >= 2: no clash in the cache
        return self._cached((1, dtype), lambda: self._load(read_tensors(desc), dtype))

    def _cached(self, key: tuple[int, torch.dtype], load: Callable[[], Loaded]) -> Loaded:
        loaded = self._loaded.get(key)
        if loaded is not None:
            return loaded
        with self._lock:  # one load per key even when concurrent calls ask for it together
            loaded = self._loaded.get(key)
            if loaded is None:
                loaded = self._loaded[key] = load()
        return loaded

    def _load(self, desc: ModelDescriptor, dtype: torch.dtype) -> Loaded:
        net = desc.net.to(device=self.device, dtype=dtype, memory_format=self.memory_format)
        net = net.eval().requires_grad_(False)
        set_attention_path(net, self.attention_path)
        # dynamic=True: one graph for every tile shape (the static path has no size branches)
        forward = torch.compile(net, dynamic=True) if self.compile else net
        return Loaded(net, desc.name, desc.scale, desc.align, desc.feature_channels, dtype, forward,
                      own=desc.own)
