"""The family engine: one model family (one weights file per scale) or one weights file.

It finds the family's descriptors (metadata only), blends photo with the default family (denoise)
and with photo-natural (look), loads each scale's network lazily per (scale, dtype) under a lock,
and runs the passes of an upscale tile by tile (:mod:`sr.inference.passes` holds the tensor work).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from .. import DEFAULT_CHOICE
from .. import weights as sr_weights
from ..descriptor import ModelDescriptor
from ..families import blend_family
from ..io import SAMPLE_TYPES, DecodedImage, to_float
from ..io import quantize as quantize_samples
from ..models import SRNet, set_attention_path
from ..request import UpscaleRequest
from .devices import available_memory
from .engine import FAMILY, Plan, SizePlan, StopCheck, UpscaleError, Upscaler, UpscaleResult
from .model_choice import ModelChoice, Source
from .passes import Loaded, is_oom, nearest_resize, run_tiles
from .precision import bf16_from_pixels, choose_dtype, choose_external_dtype, precision_name, record_name
from .resample import resize_to
from .tiling import ProgressFn, TileFn, TileGrid, TileTooSmall, min_tile, plan_axis, run_tiled, tile_for


class FamilyEngine(Upscaler, serves=FAMILY):
    """:class:`~sr.inference.engine.Upscaler` for one family or file (any ``model`` but "auto").
    ``scales``: run only these of the family's scales (auto's sides run the scales both share).
    ``shipped_dir``: the folder whose files the bf16 record measured (:func:`~sr.inference.precision.
    record_name`; default the package's own)."""

    def __init__(
        self, model: str | Path | ModelDescriptor = DEFAULT_CHOICE, *args: object,
        scales: Sequence[int] | None = None, shipped_dir: str | Path | None = None, **kwargs: object,
    ) -> None:
        super().__init__(model, *args, **kwargs)  # Upscaler's arguments, checked there
        self.name, found = self._find_weights(model)
        # the blend rules this model follows (sr.families): photo's for photo and photo-x2; none for
        # other families and files (the base class refused a denoise or look they do not take)
        self._family = blend_family(model)
        self._blend_base = self._find_blend_base(found)  # denoise < 1: the default family, by scale
        self._natural = self._find_natural()  # look > 0 (and denoise > 0): photo-natural, by scale
        keep = set(found) if scales is None else set(scales)
        self._descriptors = {s: d for s, d in found.items() if s in keep}
        for desc in self._descriptors.values():
            if self.precision == "bf16" and not desc.supports_bf16:
                raise UpscaleError(f"{desc.name}: {desc.architecture} does not run in bf16 (spandrel says "
                                   "so); use --precision auto or fp32")
        self.scales: list[int] = sorted(self._descriptors)
        self._models: dict[tuple[int, torch.dtype], Loaded] = {}  # per (scale, dtype)
        self._dtypes: dict[tuple[int, bool], torch.dtype] = {}  # per (scale, under bf16's start size)
        self._lock = threading.Lock()
        self._shipped_dir = shipped_dir
        pre = kwargs.get("pre")
        self._pre = self._find_pre(pre) if pre is not None else None  # a 1x model run before the passes

    # -- construction ------------------------------------------------------------------------
    def _find_weights(self, model: str | Path | ModelDescriptor) -> tuple[str, dict[int, ModelDescriptor]]:
        """The model's descriptors by scale (metadata only: weights are read on first use)."""
        if isinstance(model, ModelDescriptor):
            name, found = model.name, {model.scale: model}
        else:
            try:
                name, found = sr_weights.find_models(model, self.weights_dir)
            except sr_weights.WeightsError as e:
                raise UpscaleError(str(e)) from None
        for desc in found.values():
            if desc.purpose != "upscale":
                raise UpscaleError(f"{desc.name} is a 1x restoration model ({desc.architecture}): pass it "
                                   "as --pre (pre= in the service), to run before an upscaling model")
        return name, found

    def _find_pre(self, pre: str | Path | ModelDescriptor) -> ModelDescriptor:
        """The ``pre`` model's descriptor: one file of a 1x restoration model."""
        if isinstance(pre, ModelDescriptor):
            desc = pre
        else:
            try:
                found = sr_weights.find_models(pre, self.weights_dir)[1]
            except sr_weights.WeightsError as e:
                raise UpscaleError(f"pre: {e}") from None
            if len(found) != 1:
                raise UpscaleError(f"pre: {pre} names a family of {len(found)} models; give one 1x file")
            desc = next(iter(found.values()))
        if desc.purpose != "restore":
            raise UpscaleError(f"pre: {desc.name} is a x{desc.scale} upscaling model; pre takes a 1x "
                               "restoration model (denoise, de-JPEG, deblur)")
        if self.precision == "bf16" and not desc.supports_bf16:
            raise UpscaleError(f"pre: {desc.architecture} does not run in bf16 (spandrel says so); use "
                               "--precision auto or fp32")
        return desc

    def _pre_loaded(self) -> Loaded:
        """The pre model, loaded once (fp32 or bf16 as its own precision check says), under the lock."""
        assert self._pre is not None
        # _find_pre takes 1x models only, and sr's own networks all upscale: always another architecture
        dtype = choose_external_dtype(self._pre, self.precision, self.device)[0]
        key = (1, dtype)  # upscaling models have scale >= 2: no clash in the cache
        loaded = self._models.get(key)
        if loaded is None:
            with self._lock:
                loaded = self._models.get(key)
                if loaded is None:
                    loaded = self._models[key] = self._load_desc(self._weights_of(self._pre), dtype)
        return loaded

    def _find_blend_base(self, found: dict[int, ModelDescriptor]) -> dict[int, ModelDescriptor]:
        if self.denoise is None or self.denoise == 1 or self._family is None:
            return {}
        base_name = self._family.denoise_base
        _, base = self._find_weights(base_name)
        missing = sorted(set(found) - set(base))
        if missing:
            raise UpscaleError(f"denoise blends {self.name} with {base_name}, which has no "
                               f"x{', x'.join(map(str, missing))} model")
        return base

    def _find_natural(self) -> dict[int, ModelDescriptor]:
        # at D = 0 the weights are the denoise base's alone
        if not self.look or self.denoise == 0 or self._family is None:
            return {}
        try:
            return self._find_weights(self._family.look_with)[1]
        except UpscaleError as e:
            raise UpscaleError(f"look blends {self.name} with {self._family.look_with}: {e}") from None

    # -- loading -----------------------------------------------------------------------------
    def _dtype(self, scale: int, pixels: int | None) -> torch.dtype:
        """What ``scale`` runs in on a pass input of ``pixels`` (None: a large one), decided once per
        scale and size class (the device and precision are fixed)."""
        small = pixels is not None and self._bf16_too_small(pixels)
        dtype = self._dtypes.get((scale, small))
        if dtype is None:
            dtype = self._dtypes[(scale, small)] = self.dtype_for(scale, 1 if small else None)
        return dtype

    def _get(self, scale: int, pixels: int | None = None) -> Loaded:
        """The ``scale`` network loaded in the dtype an input of ``pixels`` runs in (None: a large one)."""
        dtype = self._dtype(scale, pixels)
        loaded = self._models.get((scale, dtype))
        if loaded is not None:
            return loaded
        with self._lock:  # one load per scale even when concurrent calls ask for it together
            loaded = self._models.get((scale, dtype))
            if loaded is None:
                loaded = self._models[(scale, dtype)] = self._load(scale, dtype)
        return loaded

    def _weights(self, scale: int) -> ModelDescriptor:
        """The ``scale`` descriptor with its tensors: the file's, or the denoise/look blend's."""
        desc = self._descriptors[scale]
        try:
            if self._natural:  # cached per (scale, look[, denoise]) by sr.weights
                return sr_weights.load_look(desc, self._natural[scale], self.look,
                                            base=self._blend_base.get(scale), denoise=self.denoise,
                                            name=self._blend_name(desc))
            if self._blend_base:  # cached per (scale, denoise) by sr.weights
                return sr_weights.load_blend(self._blend_base[scale], desc, self.denoise,
                                             name=self._blend_name(desc))
            return sr_weights.loaded(desc)
        except sr_weights.WeightsError as e:
            raise UpscaleError(str(e)) from None

    def _weights_of(self, desc: ModelDescriptor) -> ModelDescriptor:
        try:
            return sr_weights.loaded(desc)
        except sr_weights.WeightsError as e:
            raise UpscaleError(str(e)) from None

    def _load(self, scale: int, dtype: torch.dtype) -> Loaded:
        self.check_look([scale])
        return self._load_desc(self._weights(scale), dtype)

    def _load_desc(self, desc: ModelDescriptor, dtype: torch.dtype) -> Loaded:
        net = desc.net.to(device=self.device, dtype=dtype, memory_format=self.memory_format)
        net = net.eval().requires_grad_(False)
        set_attention_path(net, self.attention_path)
        # dynamic=True: one graph for every tile shape (the static path has no size branches)
        forward = torch.compile(net, dynamic=True) if self.compile else net
        return Loaded(net, desc.name, desc.scale, desc.align, desc.feature_channels, dtype, forward,
                      own=desc.own)

    def _bf16_too_small(self, pixels: int) -> bool:
        """Whether an input of ``pixels`` is under the size from which auto's bf16 pays on this CPU."""
        if self.device.type != "cpu" or self.precision != "auto":
            return False
        return pixels < (bf16_from_pixels() or 0)

    def _blend_name(self, desc: ModelDescriptor) -> str:
        """A blend's name, as -v and the service's X-Model show it: photo-x2@denoise=0.5,
        photo-x2@look=0.5, photo-x2@denoise=0.5,look=0.25."""
        parts = []
        if self._blend_base:
            parts.append(f"denoise={self.denoise:g}")
        if self._natural:
            parts.append(f"look={self.look:g}")
        return f"{desc.name}@{','.join(parts)}"

    # -- what the engine answers -------------------------------------------------------------
    def model_name(self, scale: int) -> str:
        """The name the ``scale`` network runs under (as a result's ``model`` says it): the file's, or
        the denoise/look blend's, e.g. photo-x2@look=0.5."""
        desc = self._descriptors[scale]
        return self._blend_name(desc) if self._natural or self._blend_base else desc.name

    def check_look(self, passes: list[int]) -> None:
        missing = sorted(set(passes) - set(self._natural)) if self._natural else []
        if missing:
            have = ", ".join(f"x{s}" for s in sorted(self._natural))
            natural, photo = self._family.look_with, self._family.name
            raise UpscaleError(f"{natural} has no x{missing[0]} weights: look {self.look:g} needs "
                               f"them (it has {have}; look 0 runs {photo} at every scale)")

    def precision_for(self, scale: int, pixels: int | None = None) -> tuple[torch.dtype, str]:
        if not self._descriptors[scale].own:  # another architecture: what spandrel and a check say
            return choose_external_dtype(self._descriptors[scale], self.precision, self.device, pixels)
        names = [record_name(self._descriptors[scale], self._shipped_dir)]
        if scale in self._natural:  # L = 1 is photo-natural's tensors exactly: its record alone
            natural = record_name(self._natural[scale], self._shipped_dir)
            names = [natural] if self.look == 1 else [*names, natural]
        if self._blend_base:
            # a blend runs bf16 only where both of its files may; D = 0 is the default family's tensors
            # exactly, so its record alone decides
            base = record_name(self._blend_base[scale], self._shipped_dir)
            names = [base] if self.denoise == 0 else [*names, base]
        return choose_dtype(self.precision, self.device, names, pixels)

    @property
    def k_max(self) -> float | None:
        values = [d.k_max for d in self._descriptors.values() if d.k_max is not None]
        return max(values) if values else None

    def network(self, scale: int) -> SRNet:
        if scale not in self._descriptors:
            raise UpscaleError(f"{self.name} has no x{scale} model (scales: {self.scales})")
        return self._get(scale).net

    def load(self, scale: int | None = None) -> None:
        for s in [scale] if scale is not None else self.scales:
            self._get(s)

    def choose(self, source: Source | None = None, img: DecodedImage | None = None) -> ModelChoice | None:
        return None

    def engine_for(self, choice: ModelChoice | None) -> FamilyEngine:
        return self

    # -- planning ----------------------------------------------------------------------------
    def tile_grid(self, scale: int, pixels: int | None = None) -> TileGrid:
        """What the tile policy needs of the ``scale`` network on a pass input of ``pixels``, from its
        descriptor (a blend has its file's architecture): nothing is loaded."""
        desc = self._descriptors[scale]
        return TileGrid(scale, desc.align, desc.feature_channels, self._dtype(scale, pixels), desc.own)

    def _overlap(self, scale: int) -> int:
        """The tile overlap of the ``scale`` pass (1: the pre model): the engine's for sr's own
        networks (unchanged); for a model of another architecture, widened to what its measured
        receptive field needs (:mod:`sr.external.receptive`, once per file), so its tiles are
        seam-free."""
        desc = self._pre if scale == 1 else self._descriptors.get(scale)
        if desc is None or desc.arch is None:
            return self.tile_overlap
        from ..external.receptive import suited_overlap

        return suited_overlap(desc, self.tile_overlap)

    def _pass_overlap(self, scale: int, tile: int | None, h: int, w: int) -> int:
        """:meth:`_overlap` where ``tile`` cuts an h x w pass into several tiles; the engine's where
        it runs whole (no overlap is used, and an outside model's radius is not measured)."""
        if tile is None or tile >= max(h, w):
            return self.tile_overlap
        wide = self._overlap(scale)
        if isinstance(self.tile, int):  # the caller's tile size: widen only as far as it allows
            desc = self._pre if scale == 1 else self._descriptors[scale]
            while wide > self.tile_overlap and min_tile(wide, desc.align) > self.tile:
                wide -= 1
        return wide

    def _tile_for(self, grid: TileGrid, h: int, w: int) -> int | None:
        desc = self._pre if grid.scale == 1 else self._descriptors.get(grid.scale)
        if self.tile == "auto" and desc is not None and desc.tiling != "supported":
            return None  # spandrel advises against tiling this model (global context, or its own tiles)
        def tile(overlap: int) -> int | None:
            try:
                return tile_for(self.tile, h, w, overlap, grid, self.device.type,
                                lambda: available_memory(self.device), self.attention_path == "static")
            except TileTooSmall as e:
                raise UpscaleError(str(e)) from None

        side = tile(self.tile_overlap)
        if desc is None or desc.arch is None or side is None or side >= max(h, w):
            return side  # sr's own overlap, or one tile: no overlap to widen (nothing is measured)
        return tile(self._pass_overlap(grid.scale, side, h, w))

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
        if self._pre is not None:  # the 1x pre model's pass: its tiles and pixels count too
            grid = TileGrid(1, self._pre.align, self._pre.feature_channels, torch.float32, self._pre.own)
            tile = self._tile_for(grid, h, w)
            overlap = self._pass_overlap(1, tile, h, w)
            rows = plan_axis(h, tile, overlap, grid.align)
            cols = plan_axis(w, tile, overlap, grid.align)
            tiles += len(rows) * len(cols)
            tiled += sum(b - a for a, b in rows) * sum(b - a for a, b in cols)
            work += h * w
        for s in passes:
            grid = self.tile_grid(s, ph * pw)
            tile = self._tile_for(grid, ph, pw)
            sides.append(tile)
            overlap = self._pass_overlap(s, tile, ph, pw)
            rows = plan_axis(ph, tile, overlap, grid.align)
            cols = plan_axis(pw, tile, overlap, grid.align)
            tiles += len(rows) * len(cols)
            tiled += sum(b - a for a, b in rows) * sum(b - a for a, b in cols) * s * s
            ph, pw = ph * s, pw * s
            work += ph * pw
        return Plan((out_h, out_w), tuple(passes), tiles * views, tiled * views, work * views, tuple(sides))

    # -- running -----------------------------------------------------------------------------
    def tile_runner(self, scale: int, with_budget_map: bool = False) -> tuple[TileFn, int]:
        loaded = self._get(scale)
        return (lambda a: self._run_tiles(loaded, [a], with_budget_map)[0]), loaded.align

    def _run_tiles(
        self, loaded: Loaded, arrs: list[np.ndarray], want_budget: bool, tta: bool = False,
        should_stop: StopCheck | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        return run_tiles(loaded, arrs, self.device, self.memory_format, self.shape_bucket, want_budget, tta,
                         should_stop)

    def _run_pass(
        self, loaded: Loaded, pixels: np.ndarray, want_budget: bool, tta: bool = False,
        should_stop: StopCheck | None = None, out_dtype: type = np.float32,
        progress: ProgressFn | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        h, w = pixels.shape[:2]
        tile = self._tile_for(loaded.grid, h, w)
        overlap = self._pass_overlap(loaded.scale, tile, h, w)

        def run_many(arrs: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray | None]]:
            return self._run_tiles(loaded, arrs, want_budget, tta, should_stop)

        while True:
            try:
                return run_tiled(
                    pixels, lambda a: run_many([a])[0], loaded.scale, tile, overlap, loaded.align,
                    want_budget, run_many=run_many if self.tile_batch > 1 and self.shape_bucket else None,
                    batch=self.tile_batch, out_dtype=out_dtype, progress=progress,
                )
            except (RuntimeError, MemoryError) as e:
                if self.device.type not in ("cuda", "mps") or not is_oom(e):
                    raise
                if self.device.type == "cuda" and torch.cuda.is_initialized():
                    torch.cuda.empty_cache()  # give the failed attempt's blocks back before retrying
                smaller = (tile or max(h, w)) // 2 // loaded.align * loaded.align
                if smaller < min_tile(overlap, loaded.align):
                    raise UpscaleError(f"out of {self.device.type} memory even with tile {tile}") from None
                tile = smaller  # retry the whole pass with half the tile (the plan changes)

    def _run_passes(
        self, pixels: np.ndarray, passes: list[int], want_budget: bool, tta: bool = False,
        should_stop: StopCheck | None = None, out_dtype: type = np.float32,
        progress: ProgressFn | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray], list[str], list[str]]:
        """Chain the passes; the last one writes ``out_dtype`` (the others feed a pass: float32).
        Returns the output, the budget maps, and each pass's network name and number type."""
        maps, names, precisions = [], [], []
        for n, s in enumerate(passes):
            loaded = self._get(s, pixels.shape[0] * pixels.shape[1])
            last = n == len(passes) - 1
            pixels, budget = self._run_pass(loaded, pixels, want_budget, tta, should_stop,
                                            out_dtype if last else np.float32, progress)
            names.append(loaded.name)
            precisions.append(precision_name(loaded.dtype))
            if budget is not None:
                maps.append(budget)
        return pixels, maps, names, precisions

    def run_sized(
        self, img: DecodedImage, size: SizePlan, alpha_mode: str, with_budget_map: bool, tta: bool,
        should_stop: StopCheck | None, quantize: bool, progress: ProgressFn | None,
    ) -> UpscaleResult:
        start = time.perf_counter()
        (out_h, out_w), passes = size
        pixels = img.pixels
        h, w = pixels.shape[:2]
        alpha = img.alpha
        quantize = quantize and alpha is None
        samples = SAMPLE_TYPES[img.bit_depth] if quantize else np.float32
        # Straight into samples only when the model's output is the final size (no resize after it).
        exact = (h * math.prod(passes), w * math.prod(passes)) == (out_h, out_w)
        with torch.inference_mode():
            pixels = to_float(pixels)  # decoded float32 as it is; samples (a quantized result) scaled
            pre_names, pre_precisions = [], []
            if self._pre is not None:  # restoration first, on the input's colour (alpha is not an image)
                loaded = self._pre_loaded()
                pixels = self._run_pass(loaded, pixels, False, tta, should_stop, np.float32, progress)[0]
                pre_names.append(loaded.name)
                pre_precisions.append(precision_name(loaded.dtype))
            out, maps, names, precisions = self._run_passes(pixels, passes, with_budget_map, tta,
                                                            should_stop, samples if exact else np.float32,
                                                            progress)
            names, precisions = pre_names + names, pre_precisions + precisions
            if out.shape[:2] != (out_h, out_w):
                out = np.clip(resize_to(out, out_h, out_w), 0, 1)
            out_alpha = None
            if alpha is not None:
                a = to_float(np.asarray(alpha))
                if alpha_mode == "model":
                    a = self._run_passes(a[:, :, None], passes, False, tta, should_stop)[0][:, :, 0]
                out_alpha = np.clip(resize_to(a, out_h, out_w), 0, 1) if a.shape != (out_h, out_w) else a
            if quantize:
                out = quantize_samples(out, samples)
        budget = None
        if with_budget_map and maps:
            budget = np.mean([nearest_resize(m, out_h, out_w) for m in maps], axis=0).astype(np.float32)
        out = np.ascontiguousarray(out, dtype=samples)
        return UpscaleResult(
            image=dataclasses.replace(img, pixels=out, alpha=out_alpha),
            budget_map=budget, model="+".join(names), scale=math.prod(passes),
            seconds=time.perf_counter() - start, precisions=tuple(precisions),
        )
