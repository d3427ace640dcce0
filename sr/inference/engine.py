"""The upscaling engine behind ``sr upscale`` and the HTTP service.

One :class:`Upscaler` holds the weights of a model family (one file per scale, loaded lazily) and
serves any number of concurrent :meth:`Upscaler.upscale` calls: every per-call value (tile plan,
buffers, budget maps) lives on the call's stack, and the only shared mutable state, the cache of
loaded networks, is filled under a lock. ``model="auto"``, ``denoise=`` (the photo family blended
with the default one) and ``look=`` (photo blended with photo-natural) follow
:mod:`sr.inference.model_choice`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import AUTO_MODEL, DEFAULT_CHOICE, DEFAULT_MODEL, NATURAL_MODEL, PHOTO_MODEL
from .. import weights as sr_weights
from ..descriptor import ModelDescriptor
from ..io import SAMPLE_TYPES, to_float
from ..io import quantize as quantize_samples
from ..models import ATTENTION_PATHS, SRNet, set_attention_path
from ..request import ALPHA_MODES, DEFAULT_TILE_OVERLAP, UpscaleRequest
from .devices import DeviceError, available_memory, configure_threads, cpu_bf16_kind, resolve_device
from .ensemble import self_ensemble
from .model_choice import AutoModel, ModelChoice, Source, check_denoise, check_look
from .precision import (
    PrecisionError,
    bf16_from_pixels,
    choose_dtype,
    parse_precision,
    record_name,
    resolve_dtype,
)
from .resample import resize_to
from .tiling import ProgressFn, TileFn, fastest_tile, min_tile, parse_tile, plan_axis, run_tiled

MAX_PASSES = 8
# A hard stop for absurd requests (1x1 -> outscale 1e5): the float32 output alone would not fit.
MAX_OUTPUT_PIXELS = 2**28
# Peak activation bytes per input pixel of a tile, per (channel x dtype byte): ru_maxrss of whole-image
# asa-base-x2 runs on CPU measured 5.4-7.9 (256-768 px squares); 12 leaves headroom. The auto tile
# keeps one tile's activations within a fraction of the free memory.
ACTIVATION_BYTES_PER_CHANNEL_PX = 12
AUTO_TILE_MEMORY_FRACTION = {"cpu": 0.25, "mps": 0.25, "cuda": 0.5}
# CPU: 512 px, not more. A 512 px tile of asa-base-x2 holds ~290 MB of fp32 activations (VmHWM, issue
# 43), a 1024 px one ~1.2 GB; with 512 a 4000x3000 photo to x2 stays within 1 GB of peak RSS (input,
# 8-bit output canvas, one band of tile rows, one tile), and the overlap recomputed costs ~3% more.
# Within this bound the CPU's auto tile follows measured speed (CPU_TILE_COST below).
AUTO_TILE_MAX = {"cpu": 512, "mps": 1024, "cuda": 2048}
# CPU speed by tile size: the network's time per input pixel of a square tile, relative to the
# fastest size, per precision, the mean over asa-base-x2, asa-base-x4 and photo-x2 of each model's
# own ratios. Big tiles are slower per pixel (their activations fall out of the caches), small ones
# recompute more overlap and pay more per-forward overhead; the auto tile takes the plan of least
# estimated time (pixels x this cost, overlap and edge tiles included) within the memory bound.
# One table per kind of CPU (devices.cpu_bf16_kind), each measured on such a machine with one
# thread, CPU time, medians of 3 interleaved rounds, each size over the same 512^2 photograph:
#   python -m research.tile_speed --precision bf16 --rounds 3 --json bf16-1.json
#   python -m research.tile_speed --models asa-base-x2 --precision fp32 --rounds 3 --json fp32-a1.json
#   (and the same for asa-base-x4 and photo-x2), then python -m research.tile_speed --merge *.json
# "amx": the 2-core AMX Xeon beside two training runs, three bf16 runs and two fp32 runs per model,
# merged; single runs moved single entries by up to ~0.3 (fp32 photo-x2); 512 was the slowest in
# every run. "emulated": the 2-core AMD EPYC Zen 3 (AVX2, no AVX-512) beside a training run, fp32
# (bf16 cannot run there). AVX-512 BF16 CPUs without AMX (Zen 4/5) were not measured: they take the
# AMX Xeon's table, the other AVX-512 machine. End to end the tile size changed a job's CPU time by
# less than the machines' noise (docs/inference.md).
CPU_TILE_COST: dict[str, dict[torch.dtype, dict[int, float]]] = {
    "amx": {
        torch.bfloat16: {128: 1.057, 192: 1.054, 256: 1.0, 384: 1.052, 512: 1.205},
        torch.float32: {128: 1.0, 192: 1.025, 256: 1.044, 384: 1.152, 512: 1.332},
    },
    "emulated": {  # one fp32 run of the three models (2026-12-07)
        torch.float32: {128: 1.075, 192: 1.064, 256: 1.005, 384: 1.124, 512: 1.335},
    },
}


def cpu_tile_cost(dtype: torch.dtype) -> dict[int, float] | None:
    """This CPU's measured tile table for ``dtype`` (:data:`CPU_TILE_COST`), or None where none was
    measured (the auto tile then takes the largest tile memory allows)."""
    return CPU_TILE_COST.get(cpu_bf16_kind(), CPU_TILE_COST["amx"]).get(dtype)


# The static attention path scores every pooled region against every other (N^2 per tile), so its
# auto tile stays smaller: 768 px at stride 2 and 4x4 regions is N = 2304, 21 MB of scores per image.
AUTO_TILE_MAX_STATIC = 768
# GPU hygiene (issue 27): on CUDA the engine runs several tiles per forward and pads every forward's
# input up to a multiple of SHAPE_BUCKET pixels, so shapes repeat across images (each new shape costs
# kernel selection, and the tiered path's host syncs are gone with the static path). On CPU the
# tiered path with exact tile shapes measured fastest (`sr bench paths`: static 0.79x tiered).
SHAPE_BUCKET = {"cuda": 64}
TILE_BATCH = {"cuda": 8}


class UpscaleError(ValueError):
    """Bad arguments: unknown model or device, unavailable scale, bad outscale/size, bad image."""


class UpscaleCancelled(RuntimeError):
    """The caller's ``should_stop`` said stop (client gone, deadline passed): the work was abandoned."""


StopCheck = Callable[[], bool]


@dataclass
class UpscaleResult:
    image: Any  # sr.io.DecodedImage: same bit depth, gray-ness, alpha and ICC profile as the input
    budget_map: np.ndarray | None  # float32 (H_out, W_out): key regions attended per pixel, or None
    model: str  # e.g. "asa-base-x2"; chained passes are joined with "+", e.g. "asa-base-x4+asa-base-x2"
    scale: int  # model scale used (the product of the passes when chained)
    seconds: float
    choice: ModelChoice | None = None  # model="auto": which family this input got, and why


@dataclass(frozen=True)
class Plan:
    """What an upscale of one input will do, known before doing it (:meth:`Upscaler.plan`)."""

    out_size: tuple[int, int]  # (out_h, out_w)
    passes: tuple[int, ...]  # model scales run one after the other
    tiles: int  # network forwards: the engine's tiles over all passes, x8 with tta
    tiled_pixels: int  # pixels those tiles output (overlaps counted twice), x8 with tta
    work_pixels: int  # pixels the network produces, summed over the passes, x8 with tta
    tiles_side: tuple[int | None, ...] = ()  # per pass, the largest tile side its plan cuts (None: whole)


@dataclass(frozen=True)
class _Loaded:
    net: SRNet
    name: str
    scale: int
    align: int  # tile starts are multiples of this (attention stride x region/window)
    channels: int
    dtype: torch.dtype  # what the network runs in (sr.inference.precision)
    forward: Any = None  # what runs the network: the net itself, or its torch.compile'd wrapper


def _is_oom(e: BaseException) -> bool:
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(e, oom) or (isinstance(e, RuntimeError) and "out of memory" in str(e).lower())


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def choose_passes(factor: float, scales: list[int]) -> list[int]:
    """Model scales to chain so their product reaches ``factor`` (>= it, then resized down).

    Preference: the smallest product (least thrown away by the final resize), then the fewest
    passes, then the least compute (small scales first: a later pass runs on a bigger image).
    E.g. with 2, 3, 4: 1.5 -> [2]; 3 -> [3]; 5 -> [2, 3]; 8 -> [2, 4]; 16 -> [4, 4].
    """
    top = max(scales)
    n_min = max(1, math.ceil(math.log(factor) / math.log(top) - 1e-9)) if factor > 1 else 1
    if n_min > MAX_PASSES:
        raise UpscaleError(f"outscale {factor:g} would need more than {MAX_PASSES} model passes")
    best: tuple | None = None
    for n in range(n_min, min(n_min + 1, MAX_PASSES) + 1):
        for seq in itertools.product(sorted(scales), repeat=n):
            prod = math.prod(seq)
            if prod < factor - 1e-9:
                continue
            cost = sum(math.prod(seq[:i]) ** 2 for i in range(n))
            key = (prod, n, cost)
            if best is None or key < best[0]:
                best = (key, list(seq))
    assert best is not None  # top ** n_min >= factor always qualifies
    return best[1]


def _nearest_resize(a: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    h, w = a.shape
    rows = np.minimum(((np.arange(out_h) + 0.5) * h / out_h).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(out_w) + 0.5) * w / out_w).astype(np.int64), w - 1)
    return a[rows[:, None], cols[None, :]]


class Upscaler:
    """Load a model family (or one weights file) once; upscale images of any size with it.

    ``model``: a family in ``weights_dir`` ('asa-base': one file per scale), a full name
    ('asa-base-x2'), a .safetensors path, or a :class:`~sr.descriptor.ModelDescriptor` (e.g. of an
    in-memory network, which the engine then uses itself: moved to its device and dtype, frozen).
    ``"auto"``: per input, the photo family for lossy files (JPEG, lossy WebP), the default family
    for the rest and for nearly lossless JPEGs and WebPs (:mod:`sr.inference.model_choice`; pass
    ``source=`` to :meth:`upscale`).

    ``denoise`` (photo and auto only; default 1): D in [0, 1] runs the photo weights blended with
    the default family's of the same scale, every tensor (1 - D) * default + D * photo.

    ``look`` (photo and auto only; default 0): L in [0, 1] runs photo's weights blended with
    photo-natural's (the GAN fine-tune), every tensor (1 - L) * photo + L * photo-natural; with D < 1
    as well, (1 - D) * default + D * that. L = 0 blends nothing (photo as trained); a scale
    photo-natural lacks is refused when a pass needs it ("photo-natural has no x3 weights").

    ``precision``: 'auto' (GPUs: bf16/fp16 as always; CPUs: bf16 where the CPU has AMX and the
    model's measured bf16 cost is on record within 0.01 dB, else fp32), 'fp32' or 'bf16'
    (:mod:`sr.inference.precision`); :meth:`dtype_for` tells what a scale runs in.
    """

    def __init__(
        self,
        model: str | Path | ModelDescriptor = DEFAULT_CHOICE,
        device: str = "auto",
        tile: int | str | None = "auto",
        tile_overlap: int = DEFAULT_TILE_OVERLAP,
        weights_dir: str | Path | None = None,
        threads: int | None = None,
        attention_path: str = "auto",
        compile: bool = False,
        tile_batch: int | None = None,
        shape_bucket: int | None = None,
        denoise: float | None = None,
        precision: str = "auto",
        look: float | None = None,
    ) -> None:
        try:
            self.denoise = check_denoise(model, denoise)
            self.look = check_look(model, look)
        except ValueError as e:
            raise UpscaleError(str(e)) from None
        # what a sibling engine (auto's two sides) is built with: these same settings
        options = dict(tile=tile, tile_overlap=tile_overlap, weights_dir=weights_dir, threads=threads,
                       attention_path=attention_path, compile=compile, tile_batch=tile_batch,
                       shape_bucket=shape_bucket, precision=precision)
        try:
            self.device = resolve_device(device)
            self.precision = parse_precision(precision)
            resolve_dtype(self.precision, self.device)  # a device that cannot run it fails here
        except (DeviceError, PrecisionError) as e:
            raise UpscaleError(str(e)) from None
        if attention_path == "auto":  # measured: tiered on CPU, fixed shapes wherever a host sync costs
            attention_path = "tiered" if self.device.type == "cpu" else "static"
        if attention_path not in ATTENTION_PATHS:
            raise UpscaleError(
                f"attention path must be auto, {' or '.join(ATTENTION_PATHS)}, got {attention_path!r}"
            )
        if compile and attention_path != "static":
            attention_path = "static"  # the tiered path breaks the graph: compiling needs the static one
        self.attention_path, self.compile = attention_path, bool(compile)
        for label, value in (("tile_batch", tile_batch), ("shape_bucket", shape_bucket)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise UpscaleError(f"{label} must be a positive integer, got {value!r}")
        self.tile_batch = tile_batch or TILE_BATCH.get(self.device.type, 1)
        self.shape_bucket = shape_bucket or SHAPE_BUCKET.get(self.device.type)
        if self.device.type == "cuda":
            # No per-shape autotuning while serving: cuDNN's benchmark mode times every algorithm for
            # each new input shape (the trainer turns it on for its fixed patches; serving must not).
            torch.backends.cudnn.benchmark = False
        # channels-last on CPU/CUDA: oneDNN/cuDNN's native conv layout, and the attention's region
        # gathers then copy contiguous per-token vectors (x2 on this CPU: ~27% faster, same output)
        self.memory_format = (
            torch.channels_last if self.device.type in ("cpu", "cuda") else torch.contiguous_format
        )
        try:
            self.threads = configure_threads(threads)
        except ValueError as e:
            raise UpscaleError(str(e)) from None
        if isinstance(tile_overlap, bool) or not isinstance(tile_overlap, int) or tile_overlap < 0:
            raise UpscaleError(f"tile_overlap must be an integer >= 0, got {tile_overlap!r}")
        self.tile_overlap = tile_overlap
        self.tile = self._parse_tile(tile)
        self.weights_dir = sr_weights.weights_folder(weights_dir)
        self._auto: AutoModel | None = None
        self._blend_base: dict[int, ModelDescriptor] = {}  # denoise < 1: the default family, by scale
        self._natural: dict[int, ModelDescriptor] = {}  # look > 0 (and denoise > 0): photo-natural, by scale
        if model == AUTO_MODEL:
            def sibling(family: str, denoise: float | None, look: float | None) -> Upscaler:
                return Upscaler(family, device=str(self.device), denoise=denoise, look=look, **options)

            try:
                self._auto = AutoModel(sibling, self.denoise, self.look)
            except ValueError as e:
                raise UpscaleError(str(e)) from None
            self.name, self._descriptors = AUTO_MODEL, self._auto.descriptors
        else:
            self.name, self._descriptors = self._find_weights(model)
            if self.denoise is not None and self.denoise != 1:
                _, base = self._find_weights(DEFAULT_MODEL)
                missing = sorted(set(self._descriptors) - set(base))
                if missing:
                    raise UpscaleError(f"denoise blends {self.name} with {DEFAULT_MODEL}, which has no "
                                       f"x{', x'.join(map(str, missing))} model")
                self._blend_base = base
            if self.look and self.denoise != 0:  # at D = 0 the weights are the default family's alone
                try:
                    _, self._natural = self._find_weights(NATURAL_MODEL)
                except UpscaleError as e:
                    raise UpscaleError(f"look blends {self.name} with {NATURAL_MODEL}: {e}") from None
        self.scales: list[int] = sorted(self._descriptors)
        self._models: dict[tuple[int, torch.dtype], _Loaded] = {}  # per (scale, dtype)
        self._dtypes: dict[tuple[int, bool], torch.dtype] = {}  # per (scale, under bf16's start size)
        self._lock = threading.Lock()

    # -- construction ------------------------------------------------------------------------
    def _parse_tile(self, tile: int | str | None) -> int | str | None:
        try:
            value = None if tile is None else parse_tile(tile)
        except ValueError as e:
            raise UpscaleError(str(e)) from None
        if value == "auto" or not value:
            return value or None
        if value < min_tile(self.tile_overlap, 1):
            raise UpscaleError(
                f"tile {value} is too small for tile_overlap {self.tile_overlap}: "
                f"need at least {min_tile(self.tile_overlap, 1)} (2 x overlap + model grid)"
            )
        return value

    def _find_weights(self, model: str | Path | ModelDescriptor) -> tuple[str, dict[int, ModelDescriptor]]:
        """The model's descriptors by scale (metadata only: weights are read on first use)."""
        if isinstance(model, ModelDescriptor):
            return model.name, {model.scale: model}
        try:
            return sr_weights.find_models(model, self.weights_dir)
        except sr_weights.WeightsError as e:
            raise UpscaleError(str(e)) from None

    def _get(self, scale: int, pixels: int | None = None) -> _Loaded:
        """The ``scale`` network loaded in the dtype an input of ``pixels`` runs in (None: a large one)."""
        small = pixels is not None and self._bf16_too_small(pixels)
        dtype = self._dtypes.get((scale, small))
        if dtype is None:  # decided once per scale and size class: the device and precision are fixed
            dtype = self._dtypes[(scale, small)] = self.dtype_for(scale, 1 if small else None)
        loaded = self._models.get((scale, dtype))
        if loaded is not None:
            return loaded
        with self._lock:  # one load per scale even when concurrent calls ask for it together
            loaded = self._models.get((scale, dtype))
            if loaded is None:
                self._check_look([scale])
                try:
                    desc = self._descriptors[scale]
                    if self._natural:  # cached per (scale, look[, denoise]) by sr.weights
                        desc = sr_weights.load_look(desc, self._natural[scale], self.look,
                                                    base=self._blend_base.get(scale), denoise=self.denoise,
                                                    name=self._blend_name(desc))
                    elif self._blend_base:  # cached per (scale, denoise) by sr.weights
                        desc = sr_weights.load_blend(self._blend_base[scale], desc, self.denoise,
                                                     name=self._blend_name(desc))
                    else:
                        desc = sr_weights.loaded(desc)
                except sr_weights.WeightsError as e:
                    raise UpscaleError(str(e)) from None
                net = desc.net.to(device=self.device, dtype=dtype, memory_format=self.memory_format)
                net = net.eval().requires_grad_(False)
                set_attention_path(net, self.attention_path)
                # dynamic=True: one graph for every tile shape (the static path has no size branches)
                forward = torch.compile(net, dynamic=True) if self.compile else net
                loaded = _Loaded(net, desc.name, scale, desc.align, net.cfg.channels, dtype, forward)
                self._models[(scale, dtype)] = loaded
        return loaded

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

    def _check_look(self, passes: list[int]) -> None:
        """UpscaleError when a look needs a scale photo-natural lacks (auto: its photo side's)."""
        if self._auto is not None:
            self._auto.engines[PHOTO_MODEL]._check_look(passes)
            return
        missing = sorted(set(passes) - set(self._natural)) if self._natural else []
        if missing:
            have = ", ".join(f"x{s}" for s in sorted(self._natural))
            raise UpscaleError(f"{NATURAL_MODEL} has no x{missing[0]} weights: look {self.look:g} needs "
                               f"them (it has {have}; look 0 runs {PHOTO_MODEL} at every scale)")

    @property
    def dtype(self) -> torch.dtype:
        """What the smallest scale (the default one) runs in; :meth:`dtype_for` for any scale."""
        return self.dtype_for(self.scales[0])

    def dtype_for(self, scale: int, pixels: int | None = None) -> torch.dtype:
        """The dtype the ``scale`` network runs in on an input of ``pixels`` (None: a large one), from
        metadata: nothing is loaded. With model="auto", the default family's (each side decides)."""
        return self.precision_for(scale, pixels)[0]

    def precision_for(self, scale: int, pixels: int | None = None) -> tuple[torch.dtype, str]:
        """(dtype, why) for the ``scale`` network on an input of ``pixels``: ``sr upscale -v``'s line."""
        if self._auto is not None:
            return self._auto.engines[DEFAULT_MODEL].precision_for(scale, pixels)
        names = [record_name(self._descriptors[scale])]
        if scale in self._natural:  # L = 1 is photo-natural's tensors exactly: its record alone
            natural = record_name(self._natural[scale])
            names = [natural] if self.look == 1 else [*names, natural]
        if self._blend_base:
            # a blend runs bf16 only where both of its files may; D = 0 is the default family's tensors
            # exactly, so its record alone decides
            base = record_name(self._blend_base[scale])
            names = [base] if self.denoise == 0 else [*names, base]
        return choose_dtype(self.precision, self.device, names, pixels)

    @property
    def k_max(self) -> float | None:
        """The most key regions any pixel may attend to (the top of the budget colour scale), or None
        when no model of this family has adaptive attention."""
        if self._auto is not None:
            values = [e.k_max for e in self._auto.engines.values() if e.k_max is not None]
            return max(values) if values else None
        values = [d.k_max for d in self._descriptors.values() if d.k_max is not None]
        return max(values) if values else None

    def network(self, scale: int) -> SRNet:
        """The network for ``scale`` as the engine runs it (device, dtype, memory format, attention
        path), loaded on first use; for benchmarks that time it against other networks."""
        if scale not in self._descriptors:
            raise UpscaleError(f"{self.name} has no x{scale} model (scales: {self.scales})")
        if self._auto is not None:  # auto: the lossless side's
            return self._auto.engines[DEFAULT_MODEL].network(scale)
        return self._get(scale).net

    def load(self, scale: int | None = None) -> None:
        """Load the weights now (all scales, or one) instead of on first use (auto: both sides)."""
        if self._auto is not None:
            for engine in self._auto.engines.values():
                engine.load(scale)
            return
        for s in [scale] if scale is not None else self.scales:
            self._get(s)

    def choose(self, source: Source | None = None, img: Any = None) -> ModelChoice | None:
        """With model="auto": the family an input gets, from ``source`` (its file path or bytes, or a
        :class:`~sr.lossy.Compression`), else from the decoded ``img``'s format. None otherwise."""
        return self._auto.choose(source, img) if self._auto is not None else None

    # -- planning ----------------------------------------------------------------------------
    def check_scale(self, scale: int | None) -> None:
        """UpscaleError unless this engine runs ``scale`` (None: its default one), checked before any
        input is read: the same refusal :meth:`plan_size` gives."""
        self.plan_size(1, 1, scale=scale)

    def plan_size(
        self, h: int, w: int, scale: int | None = None, outscale: float | None = None,
        width: int | None = None, height: int | None = None,
    ) -> tuple[tuple[int, int], list[int]]:
        """((out_h, out_w), model passes) for an h x w input; raises UpscaleError on bad arguments."""
        if scale is not None:
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale != int(scale):
                raise UpscaleError(f"scale must be one of {self.scales}, got {scale!r}")
            scale = int(scale)
            if scale not in self.scales:
                raise UpscaleError(
                    f"scale {scale} is not available for model {self.name!r} (available: "
                    f"{', '.join(map(str, self.scales))}); use outscale for other factors"
                )
        if outscale is not None and (width is not None or height is not None):
            raise UpscaleError("give either outscale or width/height, not both")
        allowed = [scale] if scale is not None else self.scales
        if outscale is not None:
            if isinstance(outscale, bool) or not isinstance(outscale, (int, float)) or not (
                math.isfinite(outscale) and outscale > 0
            ):
                raise UpscaleError(f"outscale must be a number > 0, got {outscale!r}")
            out_h, out_w = max(1, _round_half_up(h * outscale)), max(1, _round_half_up(w * outscale))
            factor = float(outscale)
        elif width is not None or height is not None:
            for label, v in (("width", width), ("height", height)):
                if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1):
                    raise UpscaleError(f"{label} must be a positive integer, got {v!r}")
            out_w = int(width) if width is not None else max(1, _round_half_up(w * height / h))
            out_h = int(height) if height is not None else max(1, _round_half_up(h * width / w))
            factor = max(out_h / h, out_w / w)
        else:
            s = scale if scale is not None else min(self.scales)
            out_h, out_w, factor = h * s, w * s, float(s)
        if out_h * out_w > MAX_OUTPUT_PIXELS:
            raise UpscaleError(
                f"output {out_w}x{out_h} is too large (limit {MAX_OUTPUT_PIXELS / 2**20:.0f} megapixels)"
            )
        passes = choose_passes(factor, allowed)
        self._check_look(passes)
        if h * w * math.prod(passes) ** 2 > MAX_OUTPUT_PIXELS:  # the model's output before the resize
            raise UpscaleError(
                f"the model passes {passes} would make a {w * math.prod(passes)}x{h * math.prod(passes)} "
                f"intermediate image (limit {MAX_OUTPUT_PIXELS / 2**20:.0f} megapixels)"
            )
        return (out_h, out_w), passes

    def plan(self, h: int, w: int, request: UpscaleRequest) -> Plan:
        """The :class:`Plan` of ``request`` on an h x w input: output size, passes, and the tiles this
        engine's own tiling cuts (loading the passes' models, whose grid the tiles align to; the auto
        tile follows the memory free now, as it does when the upscale runs). UpscaleError on bad
        arguments."""
        if self._auto is not None:  # both sides share one architecture, so one tiling: the lossless side's
            return self._auto.engines[DEFAULT_MODEL].plan(h, w, request)
        (out_h, out_w), passes = self.plan_size(h, w, request.scale, request.outscale, request.width,
                                                request.height)
        views = 8 if request.tta else 1
        tiles = tiled = work = 0
        sides: list[int | None] = []
        ph, pw = h, w
        for s in passes:
            loaded = self._get(s, ph * pw)
            tile = self._tile_for(loaded, ph, pw)
            sides.append(tile)
            rows = plan_axis(ph, tile, self.tile_overlap, loaded.align)
            cols = plan_axis(pw, tile, self.tile_overlap, loaded.align)
            tiles += len(rows) * len(cols)
            tiled += sum(b - a for a, b in rows) * sum(b - a for a, b in cols) * s * s
            ph, pw = ph * s, pw * s
            work += ph * pw
        return Plan((out_h, out_w), tuple(passes), tiles * views, tiled * views, work * views, tuple(sides))

    def _auto_tile_limit(self, loaded: _Loaded) -> int:
        """The largest tile side whose activations fit the auto tile's share of the free memory (and
        the device's cap)."""
        dtype_bytes = torch.finfo(loaded.dtype).bits // 8
        per_px = ACTIVATION_BYTES_PER_CHANNEL_PX * loaded.channels * dtype_bytes
        per_px += 3 * loaded.scale**2 * 4 * 2  # the tile's output and its weighted copy
        budget = AUTO_TILE_MEMORY_FRACTION[self.device.type] * available_memory(self.device)
        side = min(int(math.sqrt(max(budget, 0) / per_px)), AUTO_TILE_MAX[self.device.type])
        if self.attention_path == "static":
            side = min(side, AUTO_TILE_MAX_STATIC)
        return side

    def _tile_for(self, loaded: _Loaded, h: int, w: int) -> int | None:
        if self.tile is None:
            return None
        if self.tile == "auto":
            side = self._auto_tile_limit(loaded)
            costs = cpu_tile_cost(loaded.dtype) if self.device.type == "cpu" else None
            if costs is not None:  # the fastest plan by measured speed, within the memory bound
                return fastest_tile(h, w, side, self.tile_overlap, loaded.align, costs)
            if h <= side and w <= side:
                return None  # the whole image fits: exact, and no overlap recomputed
            side = max(side // loaded.align * loaded.align, min_tile(self.tile_overlap, loaded.align))
            return side
        if self.tile < min_tile(self.tile_overlap, loaded.align):
            raise UpscaleError(
                f"tile {self.tile} is too small for tile_overlap {self.tile_overlap} with this model "
                f"(need at least {min_tile(self.tile_overlap, loaded.align)})"
            )
        return self.tile

    # -- running -----------------------------------------------------------------------------
    def tile_runner(self, scale: int, with_budget_map: bool = False) -> tuple[TileFn, int]:
        """(fn, align) for measuring the tiling itself: ``fn`` runs the model on one (h, w, C) float32
        tile (call it under ``torch.inference_mode()``); tile starts should be multiples of ``align``."""
        if self._auto is not None:
            return self._auto.engines[DEFAULT_MODEL].tile_runner(scale, with_budget_map)
        loaded = self._get(scale)
        return (lambda a: self._run_tiles(loaded, [a], with_budget_map)[0]), loaded.align

    def _run_tiles(
        self, loaded: _Loaded, arrs: list[np.ndarray], want_budget: bool, tta: bool = False,
        should_stop: StopCheck | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """[(h, w, C) float32] -> [((s*h, s*w, C) float32 in [0, 1], budget (h, w) or None)], one forward.

        With a shape bucket the tiles are padded (edge replication, bottom/right) to one shape, a
        multiple of the bucket, and run as one batch; outputs are cropped back. Without one (CPU) a
        single tile runs at its exact size.
        """
        c = arrs[0].shape[2]
        sizes = [a.shape[:2] for a in arrs]
        if self.shape_bucket:
            step = math.lcm(self.shape_bucket, loaded.align)
            hb = -(-max(h for h, _ in sizes) // step) * step
            wb = -(-max(w for _, w in sizes) // step) * step
            arrs = [np.pad(a, ((0, hb - a.shape[0]), (0, wb - a.shape[1]), (0, 0)), mode="edge")
                    for a in arrs]
        elif len(arrs) > 1:
            raise ValueError("several tiles per forward need a shape bucket")
        x = torch.from_numpy(np.ascontiguousarray(np.stack(arrs).transpose(0, 3, 1, 2)))  # (B, C, H, W)
        if c == 1:
            x = x.expand(-1, 3, -1, -1)  # gray (or alpha) through the RGB model, averaged back below
        x = x.to(device=self.device, dtype=loaded.dtype)

        def net(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            # Checked before every forward (each tile batch, ensemble view and pass): the finest point
            # at which a running torch call can be abandoned.
            if should_stop is not None and should_stop():
                raise UpscaleCancelled("upscaling cancelled")
            t = t.contiguous(memory_format=self.memory_format)
            aux: dict | None = {} if want_budget else None
            y = loaded.forward(t, aux) if aux is not None else loaded.forward(t)  # (B, 3, sH, sW)
            if aux is None or not aux.get("budget_maps"):
                return y, None
            maps = torch.cat([m.float() for m in aux["budget_maps"]], dim=1)  # (B, n_blocks, H, W)
            return y, maps.mean(dim=1, keepdim=True)

        y, budget_map = self_ensemble(net, x) if tta else net(x)
        y = y.float().clamp_(0, 1)
        if c == 1:
            y = y.mean(dim=1, keepdim=True)
        out = y.permute(0, 2, 3, 1).cpu().numpy()  # (B, sH, sW, C)
        budgets = None if budget_map is None else budget_map[:, 0].cpu().numpy()
        s = loaded.scale
        return [
            (out[i, : s * h, : s * w], None if budgets is None else budgets[i, :h, :w])
            for i, (h, w) in enumerate(sizes)
        ]

    def _run_pass(
        self, loaded: _Loaded, pixels: np.ndarray, want_budget: bool, tta: bool = False,
        should_stop: StopCheck | None = None, out_dtype: type = np.float32,
        progress: ProgressFn | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        h, w = pixels.shape[:2]
        tile = self._tile_for(loaded, h, w)

        def run_many(arrs: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray | None]]:
            return self._run_tiles(loaded, arrs, want_budget, tta, should_stop)

        while True:
            try:
                return run_tiled(
                    pixels, lambda a: run_many([a])[0], loaded.scale, tile, self.tile_overlap, loaded.align,
                    want_budget, run_many=run_many if self.tile_batch > 1 and self.shape_bucket else None,
                    batch=self.tile_batch, out_dtype=out_dtype, progress=progress,
                )
            except (RuntimeError, MemoryError) as e:
                if self.device.type not in ("cuda", "mps") or not _is_oom(e):
                    raise
                if self.device.type == "cuda" and torch.cuda.is_initialized():
                    torch.cuda.empty_cache()  # give the failed attempt's blocks back before retrying
                smaller = (tile or max(h, w)) // 2 // loaded.align * loaded.align
                if smaller < min_tile(self.tile_overlap, loaded.align):
                    raise UpscaleError(f"out of {self.device.type} memory even with tile {tile}") from None
                tile = smaller  # retry the whole pass with half the tile (the plan changes)

    def _run_passes(
        self, pixels: np.ndarray, passes: list[int], want_budget: bool, tta: bool = False,
        should_stop: StopCheck | None = None, out_dtype: type = np.float32,
        progress: ProgressFn | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray], list[str]]:
        """Chain the passes; the last one writes ``out_dtype`` (the others feed a pass: float32)."""
        maps, names = [], []
        for n, s in enumerate(passes):
            loaded = self._get(s, pixels.shape[0] * pixels.shape[1])
            last = n == len(passes) - 1
            pixels, budget = self._run_pass(loaded, pixels, want_budget, tta, should_stop,
                                            out_dtype if last else np.float32, progress)
            names.append(loaded.name)
            if budget is not None:
                maps.append(budget)
        return pixels, maps, names

    def run(
        self,
        img: Any,
        request: UpscaleRequest,
        *,
        budget_map: bool = False,
        should_stop: StopCheck | None = None,
        source: Source | None = None,
        quantize: bool = False,
        progress: ProgressFn | None = None,
    ) -> UpscaleResult:
        """:meth:`upscale` with a request's size, tta and alpha mode (its model, denoise, look and
        precision are this engine's own). The budget map is computed when the request's output is
        the map, or with ``budget_map`` (a batch's extra file, the service's kept map)."""
        return self.upscale(img, scale=request.scale, outscale=request.outscale, width=request.width,
                            height=request.height, alpha_mode=request.alpha_mode,
                            with_budget_map=request.budget_map or budget_map, tta=request.tta,
                            should_stop=should_stop, source=source, quantize=quantize, progress=progress)

    def upscale(
        self,
        img: Any,
        scale: int | None = None,
        outscale: float | None = None,
        width: int | None = None,
        height: int | None = None,
        alpha_mode: str = "bicubic",
        with_budget_map: bool = False,
        tta: bool = False,
        should_stop: StopCheck | None = None,
        source: Source | None = None,
        quantize: bool = False,
        progress: ProgressFn | None = None,
    ) -> UpscaleResult:
        """Upscale a decoded image (``sr.io.DecodedImage``).

        ``scale`` picks the model scale (default: the smallest available); ``outscale`` (any float
        > 0) or ``width``/``height`` (one of them keeps the aspect ratio) give the exact output size,
        reached by the fewest model passes, then MATLAB-bicubic resizing. ``alpha_mode``: 'bicubic'
        resizes the alpha channel, 'model' runs it through the network as gray. ``tta`` averages the
        network over the 8 flips/rotations of each tile (:mod:`sr.inference.ensemble`): sharper (the
        gain is in the results table), 8x the compute. ``should_stop``, if given, is polled before
        every network forward (each tile, ensemble view and pass); when it returns True the call
        raises :class:`UpscaleCancelled` and the rest of the work is skipped. ``source`` (model="auto"
        only): the input's file path or bytes, from which auto tells lossy from lossless; without it
        the decoded format decides (JPEG lossy, anything else lossless). ``result.choice`` says which.

        ``quantize``: return integer samples (uint8; uint16 for 16-bit images) instead of float32,
        the same values an encoder would round the float output to, assembled one tile row at a
        time: no full-size float32 buffer when the last pass gives the output size (no final
        resize). Images with alpha stay float32: JPEG composites them on white, and from rounded
        colour and alpha that gives other bytes than today's (42.8 dB apart, measured).
        ``progress(done, total)`` is called after every tile of each pass (a chained pass counts
        from 0 again).
        """
        if self._auto is not None:
            choice = self._auto.choose(source, img)
            result = self._auto.engine(choice).upscale(
                img, scale=scale, outscale=outscale, width=width, height=height, alpha_mode=alpha_mode,
                with_budget_map=with_budget_map, tta=tta, should_stop=should_stop, quantize=quantize,
                progress=progress)
            return dataclasses.replace(result, choice=choice)
        start = time.perf_counter()
        pixels = getattr(img, "pixels", None)
        if not isinstance(pixels, np.ndarray) or pixels.ndim != 3 or pixels.shape[2] not in (1, 3):
            raise UpscaleError("image pixels must be an (H, W, 1|3) array of floats or 8/16-bit samples")
        if pixels.shape[0] < 1 or pixels.shape[1] < 1:
            raise UpscaleError(f"image is empty ({pixels.shape[1]}x{pixels.shape[0]})")
        for label, flag in (("tta", tta), ("quantize", quantize)):
            if not isinstance(flag, bool):
                raise UpscaleError(f"{label} must be true or false, got {flag!r}")
        if alpha_mode not in ALPHA_MODES:
            raise UpscaleError(f"alpha_mode must be one of {', '.join(ALPHA_MODES)}, got {alpha_mode!r}")
        h, w = pixels.shape[:2]
        (out_h, out_w), passes = self.plan_size(h, w, scale, outscale, width, height)
        alpha = getattr(img, "alpha", None)
        quantize = quantize and alpha is None
        samples = SAMPLE_TYPES[getattr(img, "bit_depth", 8)] if quantize else np.float32
        # Straight into samples only when the model's output is the final size (no resize after it).
        exact = (h * math.prod(passes), w * math.prod(passes)) == (out_h, out_w)
        with torch.inference_mode():
            pixels = to_float(pixels)  # decoded float32 as it is; samples (a quantized result) scaled
            out, maps, names = self._run_passes(pixels, passes, with_budget_map, tta, should_stop,
                                                samples if exact else np.float32, progress)
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
            budget = np.mean([_nearest_resize(m, out_h, out_w) for m in maps], axis=0).astype(np.float32)
        out = np.ascontiguousarray(out, dtype=samples)
        image = dataclasses.replace(img, pixels=out, alpha=out_alpha)
        return UpscaleResult(
            image=image, budget_map=budget, model="+".join(names), scale=math.prod(passes),
            seconds=time.perf_counter() - start,
        )


def list_models(weights_dir: str | Path | None = None) -> list[dict]:
    """Shipped models and what their metadata says: name, preset, scale, params, validation scores."""
    models = []
    for desc in sr_weights.catalog(weights_dir):
        entry: dict[str, Any] = {
            "name": desc.name,
            # the family name that Upscaler(model=...) resolves: metadata first, else the file name
            "preset": desc.meta.get("preset") or desc.family,
            "scale": desc.scale,
            "params": desc.params,
            "attention": desc.attention,
            "k_max": desc.k_max,
            "steps": desc.steps,
            "path": str(desc.path),
        }
        for bench in ("Set5", "Set14"):
            scores = desc.validation.get(bench) or {}
            entry[f"{bench.lower()}_psnr"] = scores.get("psnr")
            entry[f"{bench.lower()}_ssim"] = scores.get("ssim")
        models.append(entry)
    return models
