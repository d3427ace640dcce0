"""The upscaling engine behind ``sr upscale`` and the HTTP service: what callers use of it.

:class:`Upscaler` is the engine's public surface. ``Upscaler(model, ...)`` builds the engine kind
that :data:`ENGINE_KINDS` lists for ``model`` (its rows: :mod:`sr.inference.kinds`): a
:class:`~sr.inference.family.FamilyEngine` (one model family, or one weights file: weights finding,
denoise/look blending, loading, tiling, passes), or for ``model="auto"`` an
:class:`~sr.inference.auto.AutoEngine`, which composes two family engines through this same surface
(:mod:`sr.inference.model_choice` says which side an input gets). What both share lives here: the
size plan (:meth:`Upscaler.plan_size`), the order of an upscale (choose, check, plan, run), and the
result types. Every engine serves any number of concurrent calls: per-call values live on the
call's stack, and the only shared mutable state, a family's cache of loaded networks, is filled
under a lock.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import DEFAULT_CHOICE
from .. import weights as sr_weights
from ..descriptor import ModelDescriptor
from ..io import DecodedImage
from ..models import SRNet
from ..request import ALPHA_MODES, DEFAULT_TILE_OVERLAP, UpscaleRequest
from .errors import StopCheck, UpscaleCancelled, UpscaleError
from .model_choice import ModelChoice, Source, check_denoise, check_look
from .options import engine_options
from .sizing import MAX_OUTPUT_PIXELS, MAX_PASSES, check_intermediate, check_scale, choose_passes, output_size
from .tiling import ProgressFn, TileFn

__all__ = ["ALPHA_MODES", "DEFAULT_TILE_OVERLAP", "ENGINE_KINDS", "MAX_OUTPUT_PIXELS", "MAX_PASSES",
           "EngineKind", "Plan", "PlannedUpscale", "SizePlan", "StopCheck", "UpscaleCancelled",
           "UpscaleError", "UpscaleResult", "Upscaler", "add_engine_kind", "choose_passes", "engine_class",
           "list_models"]

# ((out_h, out_w), model passes): what Upscaler.plan_size gives.
SizePlan = tuple[tuple[int, int], list[int]]
Model = str | Path | ModelDescriptor  # what Upscaler(model=...) takes


@dataclass
class UpscaleResult:
    image: DecodedImage  # same bit depth, gray-ness, alpha and ICC profile as the input
    budget_map: np.ndarray | None  # float32 (H_out, W_out): key regions attended per pixel, or None
    model: str  # e.g. "asa-base-x2"; chained passes are joined with "+", e.g. "asa-base-x4+asa-base-x2"
    scale: int  # model scale used (the product of the passes when chained)
    seconds: float
    choice: ModelChoice | None = None  # model="auto": which family this input got, and why
    # per network run, in ``model``'s order: the number type it ran in ("bf16", "fp32", "fp16"), as
    # decided for this input's size (sr upscale -v's per-file line)
    precisions: tuple[str, ...] = ()

    def describe_run(self) -> str:
        """What ran, each network with its number type: 'photo-x4 in bf16', 'asa-base-x4 in bf16 +
        asa-base-x2 in fp32'; the model name alone when the types are not known."""
        names = self.model.split("+")
        if len(names) != len(self.precisions):
            return self.model
        return " + ".join(f"{n} in {p}" for n, p in zip(names, self.precisions, strict=True))


@dataclass(frozen=True)
class Plan:
    """What an upscale of one input will do, known before doing it (:meth:`Upscaler.plan`)."""

    out_size: tuple[int, int]  # (out_h, out_w)
    passes: tuple[int, ...]  # model scales run one after the other
    tiles: int  # network forwards: the engine's tiles over all passes, x8 with tta
    tiled_pixels: int  # pixels those tiles output (overlaps counted twice), x8 with tta
    work_pixels: int  # pixels the network produces, summed over the passes, x8 with tta
    tiles_side: tuple[int | None, ...] = ()  # per pass, the largest tile side its plan cuts (None: whole)


def check_input(img: DecodedImage, tta: bool, quantize: bool, alpha_mode: str) -> tuple[int, int]:
    """(h, w) of an image an upscale can take; UpscaleError saying what is wrong otherwise."""
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
    return pixels.shape[0], pixels.shape[1]


class Upscaler(ABC):
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

    ``pre``: a 1x restoration model file (denoise, de-JPEG, deblur: SCUNet, FBCNN, DnCNN, ...) run
    on every input before the upscaling passes, tiled the same way; None runs none.

    The other arguments are the engine's options, checked once (:func:`sr.inference.options.engine_options`).
    ``threads`` and the backend flags apply around the engine's own loads and forwards only
    (:func:`sr.inference.devices.torch_settings`): building or running an engine leaves torch's
    process-wide settings as they were.
    """

    name: str
    scales: list[int]  # the model scales this engine runs, ascending
    # model="auto": its family engines by family name, the one :meth:`choose` names runs an input;
    # empty for an engine that runs every input itself
    sides: dict[str, Upscaler]
    denoise: float | None
    look: float | None
    # the options, as sr.inference.options.EngineOptions resolved them
    device: torch.device
    precision: str
    attention_path: str
    compile: bool
    tile_batch: int
    shape_bucket: int | None
    memory_format: torch.memory_format
    threads: int
    tile_overlap: int
    tile: int | str | None
    weights_dir: Path

    def __new__(cls, model: Model = DEFAULT_CHOICE, *args: object, **kwargs: object) -> Upscaler:
        if cls is Upscaler:  # Upscaler(...) builds the kind ENGINE_KINDS lists first for the model
            cls = engine_class(model)
        return super().__new__(cls)

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
        pre: str | Path | ModelDescriptor | None = None,
    ) -> None:
        """What every engine does first: check denoise and look for ``model``, then the options."""
        try:
            self.denoise = check_denoise(model, denoise)
            self.look = check_look(model, look)
        except ValueError as e:
            raise UpscaleError(str(e)) from None
        options = engine_options(device, tile, tile_overlap, weights_dir, threads, attention_path, compile,
                                 tile_batch, shape_bucket, precision)
        for f in dataclasses.fields(options):
            setattr(self, f.name, getattr(options, f.name))
        self.sides = {}
        # the settings as given (auto builds its sides with them: each checks them as any engine does)
        self._settings: dict[str, object] = dict(
            device=str(self.device), tile=tile, tile_overlap=tile_overlap, weights_dir=weights_dir,
            threads=threads, attention_path=attention_path, compile=compile, tile_batch=tile_batch,
            shape_bucket=shape_bucket, precision=precision, pre=pre)

    @classmethod
    def for_request(cls, request: UpscaleRequest, **options: object) -> Upscaler:
        """The engine ``request`` asks for: its model, pre model, denoise, look and precision, with
        the engine's other arguments from ``options`` (device, tile, threads, weights_dir, ...): the one
        way the CLI, the service and the cluster turn a request into an engine."""
        return Upscaler(request.model, denoise=request.denoise, look=request.look,
                        precision=request.precision, pre=request.pre, **options)  # type: ignore[arg-type]

    # -- what each engine answers ------------------------------------------------------------
    @abstractmethod
    def precision_for(self, scale: int, pixels: int | None = None) -> tuple[torch.dtype, str]:
        """(dtype, why) for the ``scale`` network on an input of ``pixels``: ``sr upscale -v``'s line."""

    @property
    @abstractmethod
    def k_max(self) -> float | None:
        """The most key regions any pixel may attend to (the top of the budget colour scale), or None
        when no model of this engine has adaptive attention."""

    @abstractmethod
    def network(self, scale: int, pixels: int | None = None) -> SRNet:
        """The network for ``scale`` as the engine runs it on an input of ``pixels`` (None: a large
        one; the dtype may depend on the size, :meth:`dtype_for`), with its device, memory format and
        attention path, loaded on first use; for benchmarks that time it against other networks."""

    @abstractmethod
    def load(self, scale: int | None = None) -> None:
        """Load the weights now (all scales, or one) instead of on first use."""

    @abstractmethod
    def choose(self, source: Source | None = None, img: DecodedImage | None = None) -> ModelChoice | None:
        """With model="auto": the family an input gets, from ``source`` (its file path or bytes, or a
        :class:`~sr.lossy.Compression`), else from the decoded ``img``'s format. None otherwise."""

    @abstractmethod
    def check_look(self, passes: list[int]) -> None:
        """UpscaleError when a look needs a scale photo-natural lacks."""

    @abstractmethod
    def plan(self, h: int, w: int, request: UpscaleRequest) -> Plan:
        """The :class:`Plan` of ``request`` on an h x w input, from metadata (nothing is loaded)."""

    @abstractmethod
    def tile_runner(self, scale: int, with_budget_map: bool = False) -> tuple[TileFn, int]:
        """(fn, align) for measuring the tiling itself: ``fn`` runs the model on one (h, w, C) float32
        tile (call it under ``torch.inference_mode()``); tile starts should be multiples of ``align``."""

    @abstractmethod
    def run_sized(
        self, img: DecodedImage, size: SizePlan, alpha_mode: str, with_budget_map: bool, tta: bool,
        should_stop: StopCheck | None, quantize: bool, progress: ProgressFn | None,
    ) -> UpscaleResult:
        """Upscale a checked image to a size already planned (:meth:`plan_size`)."""

    # -- shared ------------------------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        """What the smallest scale (the default one) runs in; :meth:`dtype_for` for any scale."""
        return self.dtype_for(self.scales[0])

    def dtype_for(self, scale: int, pixels: int | None = None) -> torch.dtype:
        """The dtype the ``scale`` network runs in on an input of ``pixels`` (None: a large one), from
        metadata: nothing is loaded. With model="auto", the default family's (each side decides)."""
        return self.precision_for(scale, pixels)[0]

    def check_scale(self, scale: int | None) -> None:
        """UpscaleError unless this engine runs ``scale`` (None: its default one), checked before any
        input is read: the same refusal :meth:`plan_size` gives."""
        self.plan_size(1, 1, scale=scale)

    def plan_size(
        self, h: int, w: int, scale: int | None = None, outscale: float | None = None,
        width: int | None = None, height: int | None = None,
    ) -> SizePlan:
        """((out_h, out_w), model passes) for an h x w input; raises UpscaleError on bad arguments."""
        if scale is not None:
            scale = check_scale(scale, self.scales, self.name)
        out_size, factor = output_size(h, w, scale, outscale, width, height, self.scales)
        passes = choose_passes(factor, [scale] if scale is not None else self.scales)
        self.check_look(passes)
        check_intermediate(h, w, passes)
        return out_size, passes

    def planned(self, h: int, w: int, request: UpscaleRequest, source: Source | None = None,
                img: DecodedImage | None = None) -> PlannedUpscale:
        """auto's choice and the size plan of ``request`` for h x w inputs, made once (a clip's
        frames): calling the result upscales each such image as :meth:`run` would."""
        choice = self.choose(source, img)
        engine = self if choice is None else self.sides[choice.model]
        size = engine.plan_size(h, w, request.scale, request.outscale, request.width, request.height)
        return PlannedUpscale(engine, (h, w), size, request, choice)

    def run(
        self, img: DecodedImage, request: UpscaleRequest, *, budget_map: bool = False,
        should_stop: StopCheck | None = None, source: Source | None = None, quantize: bool = False,
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
        self, img: DecodedImage, scale: int | None = None, outscale: float | None = None,
        width: int | None = None, height: int | None = None, alpha_mode: str = "bicubic",
        with_budget_map: bool = False, tta: bool = False, should_stop: StopCheck | None = None,
        source: Source | None = None, quantize: bool = False, progress: ProgressFn | None = None,
    ) -> UpscaleResult:
        """Upscale a decoded image.

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
        choice = self.choose(source, img)
        engine = self if choice is None else self.sides[choice.model]
        h, w = check_input(img, tta, quantize, alpha_mode)
        size = engine.plan_size(h, w, scale, outscale, width, height)
        result = engine.run_sized(img, size, alpha_mode, with_budget_map, tta, should_stop, quantize,
                                  progress)
        return result if choice is None else dataclasses.replace(result, choice=choice)


@dataclass(frozen=True)
class PlannedUpscale:
    """One input size's choice and size plan (:meth:`Upscaler.planned`): call it on each image of
    that size, e.g. every frame of a clip, instead of choosing and planning per image."""

    engine: Upscaler  # the engine that runs these inputs (auto: the chosen side)
    in_size: tuple[int, int]  # (h, w) the plan is for
    size: SizePlan
    request: UpscaleRequest
    choice: ModelChoice | None = None

    def __call__(self, img: DecodedImage, *, budget_map: bool = False, should_stop: StopCheck | None = None,
                 quantize: bool = False, progress: ProgressFn | None = None) -> UpscaleResult:
        r = self.request
        hw = check_input(img, r.tta, quantize, r.alpha_mode)
        if hw != self.in_size:
            raise UpscaleError(f"planned for {self.in_size[1]}x{self.in_size[0]} inputs, got {hw[1]}x{hw[0]}")
        result = self.engine.run_sized(img, self.size, r.alpha_mode, r.budget_map or budget_map, r.tta,
                                       should_stop, quantize, progress)
        return result if self.choice is None else dataclasses.replace(result, choice=self.choice)


@dataclass(frozen=True)
class EngineKind:
    """One kind of engine: ``engine`` (an :class:`Upscaler` subclass taking Upscaler's arguments) is
    what ``Upscaler(model, ...)`` builds where ``serves(model)`` is true."""

    name: str
    serves: Callable[[Model], bool]
    engine: type[Upscaler]


# The engine kinds Upscaler(model, ...) chooses from, asked in order: a plugin's first (add_engine_kind),
# then the built-in rows, which sr.inference.kinds lists from above the engines they name.
ENGINE_KINDS: list[EngineKind] = []


def add_engine_kind(kind: EngineKind) -> None:
    """Make ``Upscaler(model, ...)`` build ``kind.engine`` for the models ``kind.serves``, ahead of the
    kinds already listed. ValueError for a name already listed or an engine that is not an Upscaler."""
    if not (isinstance(kind.engine, type) and issubclass(kind.engine, Upscaler)):
        raise ValueError(f"engine kind {kind.name!r}: {kind.engine!r} is not an Upscaler subclass")
    if any(k.name == kind.name for k in ENGINE_KINDS):
        raise ValueError(f"engine kind {kind.name!r} is already listed")
    ENGINE_KINDS.insert(0, kind)


def engine_class(model: Model) -> type[Upscaler]:
    """The class ``Upscaler(model, ...)`` builds: the first listed kind that serves ``model``."""
    for kind in ENGINE_KINDS:
        if kind.serves(model):
            return kind.engine
    raise UpscaleError(f"no engine kind serves model {model!r}")


def list_models(weights_dir: str | Path | None = None) -> list[dict[str, object]]:
    """Shipped models and what their metadata says: name, preset, scale, params, validation scores."""
    models = []
    for desc in sr_weights.catalog(weights_dir):
        entry: dict[str, object] = {
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

