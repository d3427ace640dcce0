"""An engine's settings, checked once: device, precision, threads, attention path, tiling, GPU batching.

Both engines (:mod:`sr.inference.family`, :mod:`sr.inference.auto`) build one :class:`EngineOptions`
with :func:`engine_options`, in the same order as they always checked them, so a bad value gives
the same :class:`~sr.inference.engine.UpscaleError` whichever engine the model picks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .. import weights as sr_weights
from ..models import ATTENTION_PATHS
from ..request import parse_tile
from .devices import DeviceError, resolve_device, resolve_threads
from .errors import UpscaleError
from .precision import PrecisionError, parse_precision, resolve_dtype
from .tiling import min_tile

# On CUDA the engine runs several tiles per forward and pads every forward's input up to a multiple of
# SHAPE_BUCKET pixels, so shapes repeat across images: each new shape costs kernel selection, and the
# static attention path it runs there has none of the tiered path's host syncs. On CPU the
# tiered path with exact tile shapes measured fastest (`sr bench paths`: static 0.79x tiered).
SHAPE_BUCKET = {"cuda": 64}
TILE_BATCH = {"cuda": 8}


@dataclass(frozen=True)
class EngineOptions:
    """What an engine runs with, every value checked and resolved ("auto" made concrete)."""

    device: torch.device
    precision: str  # 'auto', 'fp32' or 'bf16' (sr.inference.precision)
    attention_path: str  # 'tiered' or 'static'
    compile: bool
    tile_batch: int  # tiles per forward (> 1 only with a shape bucket)
    shape_bucket: int | None  # pad each forward's input to a multiple of this (None: exact shapes)
    memory_format: torch.memory_format
    threads: int
    tile_overlap: int
    tile: int | str | None  # a size in pixels, "auto", or None (whole images)
    weights_dir: Path


def _attention_path(name: str, device: torch.device, compile: bool) -> str:
    if name == "auto":  # measured: tiered on CPU, fixed shapes wherever a host sync costs
        name = "tiered" if device.type == "cpu" else "static"
    if name not in ATTENTION_PATHS:
        raise UpscaleError(f"attention path must be auto, {' or '.join(ATTENTION_PATHS)}, got {name!r}")
    return "static" if compile else name  # the tiered path breaks the graph: compiling needs the static one


def _positive(label: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise UpscaleError(f"{label} must be a positive integer, got {value!r}")


def _tile(tile: int | str | None, overlap: int) -> int | str | None:
    try:
        value = None if tile is None else parse_tile(tile)
    except ValueError as e:
        raise UpscaleError(str(e)) from None
    if value == "auto" or not value:
        return value or None
    if value < min_tile(overlap, 1):
        raise UpscaleError(
            f"tile {value} is too small for tile_overlap {overlap}: "
            f"need at least {min_tile(overlap, 1)} (2 x overlap + model grid)"
        )
    return value


def engine_options(
    device: str, tile: int | str | None, tile_overlap: int, weights_dir: str | Path | None,
    threads: int | None, attention_path: str, compile: bool, tile_batch: int | None,
    shape_bucket: int | None, precision: str,
) -> EngineOptions:
    """The checked options (UpscaleError saying which value is wrong). Sets nothing in torch: the
    engine applies its thread count and backend flags around its own work
    (:func:`~sr.inference.devices.torch_settings`)."""
    try:
        dev = resolve_device(device)
        precision = parse_precision(precision)
        resolve_dtype(precision, dev)  # a device that cannot run it fails here
    except (DeviceError, PrecisionError) as e:
        raise UpscaleError(str(e)) from None
    path = _attention_path(attention_path, dev, compile)
    _positive("tile_batch", tile_batch)
    _positive("shape_bucket", shape_bucket)
    # channels-last on CPU/CUDA: oneDNN/cuDNN's native conv layout, and the attention's region
    # gathers then copy contiguous per-token vectors (x2 on this CPU: ~27% faster, same output)
    memory_format = torch.channels_last if dev.type in ("cpu", "cuda") else torch.contiguous_format
    try:
        n_threads = resolve_threads(threads)
    except ValueError as e:
        raise UpscaleError(str(e)) from None
    if isinstance(tile_overlap, bool) or not isinstance(tile_overlap, int) or tile_overlap < 0:
        raise UpscaleError(f"tile_overlap must be an integer >= 0, got {tile_overlap!r}")
    return EngineOptions(
        device=dev, precision=precision, attention_path=path, compile=bool(compile),
        tile_batch=tile_batch or TILE_BATCH.get(dev.type, 1),
        shape_bucket=shape_bucket or SHAPE_BUCKET.get(dev.type), memory_format=memory_format,
        threads=n_threads, tile_overlap=tile_overlap, tile=_tile(tile, tile_overlap),
        weights_dir=sr_weights.weights_folder(weights_dir),
    )
