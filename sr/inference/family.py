"""The family engine: one model family (one weights file per scale) or one weights file.

What it runs is found once, from metadata (:mod:`sr.inference.family_weights`: the family's files,
the partners of a denoise or look blend, the pre model); each scale's network loads on first use
(:mod:`sr.inference.networks`); the passes run in :class:`~sr.inference.passes.PassChain`, each
cut into tiles when it comes (:class:`~sr.inference.tiling.TilePolicy`), and the result is resized to
the exact output size last (:mod:`sr.inference.resample`). Loads and forwards run with the engine's
own thread count and backend flags (:func:`~sr.inference.devices.torch_settings`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from .. import DEFAULT_CHOICE
from ..descriptor import ModelDescriptor
from ..io import SAMPLE_TYPES, DecodedImage, to_float
from ..io import quantize as quantize_samples
from ..models import SRNet
from ..request import UpscaleRequest
from .devices import torch_settings
from .engine import Plan, SizePlan, StopCheck, UpscaleError, Upscaler, UpscaleResult
from .family_weights import FamilyWeights
from .model_choice import ModelChoice, Source
from .networks import Networks
from .passes import Loaded, PassChain, run_tiles
from .resample import fit_to, mean_budget
from .tiling import ProgressFn, TileFn, TileGrid, TilePolicy, plan_axis


class FamilyEngine(Upscaler):
    """:class:`~sr.inference.engine.Upscaler` for one family or file (any ``model`` but "auto").
    ``scales``: run only these of the family's scales (auto's sides run the scales both share).
    ``shipped_dir``: the folder whose files the bf16 record measured (:func:`~sr.inference.precision.
    record_name`; default the package's own)."""

    def __init__(
        self, model: str | Path | ModelDescriptor = DEFAULT_CHOICE, *args: object,
        scales: Sequence[int] | None = None, shipped_dir: str | Path | None = None, **kwargs: object,
    ) -> None:
        super().__init__(model, *args, **kwargs)  # Upscaler's arguments, checked there
        pre = kwargs.get("pre")
        self._weights = FamilyWeights.find(
            model, self.weights_dir, denoise=self.denoise, look=self.look, precision=self.precision,
            scales=None if scales is None else list(scales), pre=pre)  # type: ignore[arg-type]
        self.name = self._weights.name
        self.scales: list[int] = sorted(self._weights.descriptors)
        self._networks = Networks(self._weights, self.device, self.precision, self.memory_format,
                                  self.attention_path, self.compile, shipped_dir)
        self._tiles = TilePolicy(self.tile, self.tile_overlap, self.device, self.attention_path == "static")
        self._chain = PassChain(self._tiles, self._pass_network, self._weights.descriptor, self.device,
                                self.memory_format, self.shape_bucket, self.tile_batch)

    # -- what the engine answers -------------------------------------------------------------
    def model_name(self, scale: int) -> str:
        """The name the ``scale`` network runs under (as a result's ``model`` says it): the file's, or
        the denoise/look blend's, e.g. photo-x2@look=0.5."""
        return self._weights.model_name(scale)

    def check_look(self, passes: list[int]) -> None:
        self._weights.check_look(passes)

    def precision_for(self, scale: int, pixels: int | None = None) -> tuple[torch.dtype, str]:
        return self._networks.precision_for(scale, pixels)

    @property
    def k_max(self) -> float | None:
        return self._weights.k_max

    def network(self, scale: int, pixels: int | None = None) -> SRNet:
        """The ``scale`` network for inputs of ``pixels`` (loaded now if it was not); forwards the
        caller runs on it run with the caller's thread count, not the engine's."""
        return self._loaded(scale, pixels).net

    def _loaded(self, scale: int, pixels: int | None = None) -> Loaded:
        """The ``scale`` network as the engine runs it on an input of ``pixels`` (None: a large one),
        loaded now if it was not; UpscaleError for a scale this engine does not run."""
        if scale not in self._weights.descriptors:
            raise UpscaleError(f"{self.name} has no x{scale} model (scales: {self.scales})")
        with torch_settings(self.device, self.threads):
            return self._networks.get(scale, pixels)

    def _pass_network(self, scale: int | None, pixels: int) -> Loaded:
        """What a pass of :class:`~sr.inference.passes.PassChain` runs: the ``scale`` network for an
        input of ``pixels``, or (None) the pre model; loaded now if it was not."""
        return self._networks.pre() if scale is None else self._networks.get(scale, pixels)

    def load(self, scale: int | None = None) -> None:
        with torch_settings(self.device, self.threads):
            for s in [scale] if scale is not None else self.scales:
                self._networks.get(s)

    def choose(self, source: Source | None = None, img: DecodedImage | None = None) -> ModelChoice | None:
        return None

    # -- planning ----------------------------------------------------------------------------
    def tile_grid(self, scale: int, pixels: int | None = None) -> TileGrid:
        """What the tile policy needs of the ``scale`` network on a pass input of ``pixels``, from its
        descriptor (a blend has its file's architecture): nothing is loaded."""
        desc = self._weights.descriptors[scale]
        dtype = self._networks.dtype(scale, pixels)
        return TileGrid(scale, desc.align, desc.feature_channels, dtype, desc.own)

    def plan(self, h: int, w: int, request: UpscaleRequest) -> Plan:
        """The :class:`Plan` of ``request`` on an h x w input: output size, passes, and the tiles this
        engine's own tiling cuts, from the descriptors (nothing is loaded; the auto tile follows the
        memory free now, as it does when the upscale runs). UpscaleError on bad arguments."""
        (out_h, out_w), passes = self.plan_size(h, w, request.scale, request.outscale, request.width,
                                                request.height)
        views = 8 if request.tta else 1
        tiles = tiled = work = 0
        sides: list[int | None] = []
        ph, pw = h, w
        pre = self._weights.pre
        if pre is not None:  # the 1x pre model's pass: its tiles and pixels count too
            grid = TileGrid(1, pre.align, pre.feature_channels, torch.float32, pre.own)
            tile, overlap = self._tiles.cut(pre, grid, h, w)
            rows = plan_axis(h, tile, overlap, grid.align)
            cols = plan_axis(w, tile, overlap, grid.align)
            tiles += len(rows) * len(cols)
            tiled += sum(b - a for a, b in rows) * sum(b - a for a, b in cols)
            work += h * w
        for s in passes:
            grid = self.tile_grid(s, ph * pw)
            tile, overlap = self._tiles.cut(self._weights.descriptors[s], grid, ph, pw)
            sides.append(tile)
            rows = plan_axis(ph, tile, overlap, grid.align)
            cols = plan_axis(pw, tile, overlap, grid.align)
            tiles += len(rows) * len(cols)
            tiled += sum(b - a for a, b in rows) * sum(b - a for a, b in cols) * s * s
            ph, pw = ph * s, pw * s
            work += ph * pw
        return Plan((out_h, out_w), tuple(passes), tiles * views, tiled * views, work * views, tuple(sides))

    # -- running -----------------------------------------------------------------------------
    def tile_runner(self, scale: int, with_budget_map: bool = False) -> tuple[TileFn, int]:
        loaded = self._loaded(scale)

        def run(a: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
            with torch_settings(self.device, self.threads):
                return run_tiles(loaded, [a], self.device, self.memory_format, self.shape_bucket,
                                 with_budget_map)[0]

        return run, loaded.align

    def run_sized(
        self, img: DecodedImage, size: SizePlan, alpha_mode: str, with_budget_map: bool, tta: bool,
        should_stop: StopCheck | None, quantize: bool, progress: ProgressFn | None,
    ) -> UpscaleResult:
        start = time.perf_counter()
        (out_h, out_w), passes = size
        h, w = img.pixels.shape[:2]
        quantize = quantize and img.alpha is None
        samples = SAMPLE_TYPES[img.bit_depth] if quantize else np.float32
        # Straight into samples only when the model's output is the final size (no resize after it).
        exact = (h * math.prod(passes), w * math.prod(passes)) == (out_h, out_w)
        with torch_settings(self.device, self.threads), torch.inference_mode():
            # float32 as it is; integer samples stay integers until each tile is cut (passes._batch
            # converts them to the same floats): a quarter of float32's memory for a big 8-bit photo
            pixels = img.pixels
            alpha = None if img.alpha is None else to_float(np.asarray(img.alpha))
            chained = self._chain.run_passes(
                pixels, alpha if alpha_mode == "model" else None, passes, self._weights.pre is not None,
                with_budget_map, tta, should_stop, samples if exact else np.float32, progress)
            out, out_alpha = fit_to(chained.pixels, chained.alpha if alpha_mode == "model" else alpha,
                                    out_h, out_w)
            if quantize:
                out = quantize_samples(out, samples)
        budget = mean_budget(chained.budget_maps, out_h, out_w) if with_budget_map else None
        out = np.ascontiguousarray(out, dtype=samples)
        return UpscaleResult(
            image=dataclasses.replace(img, pixels=out, alpha=out_alpha),
            budget_map=budget, model="+".join(chained.names), scale=math.prod(passes),
            seconds=time.perf_counter() - start, precisions=tuple(chained.precisions),
        )
