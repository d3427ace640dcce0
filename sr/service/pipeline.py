"""One upscale job: the client's form as an :class:`sr.request.UpscaleRequest` (:func:`form_request`,
validated by the request itself, as the CLI's arguments are), its engine (:func:`engine_for`), its
predicted work (:func:`plan_work`, the engine's own plan), the run in a worker thread (decode ->
engine -> encode, timed per stage: :func:`run_job`) and the answer's headers (:func:`result_headers`).

Refusals are domain errors (:mod:`sr.service.errors`, :class:`WorkLimitError`, sr.io's and the
engine's own); their HTTP answers are one table, :mod:`sr.service.routes.errors`.
"""

from __future__ import annotations

import io
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from sr import NATURAL_MODEL
from sr.inference import Upscaler
from sr.io import FORMATS, writable_format_for
from sr.request import UpscaleRequest, same_format

from .catalog import ModelCatalog, UnknownModelError
from .errors import InvalidRequestError
from .hub import ModelHub
from .jobs import JobStopped
from .work_model import Work

if TYPE_CHECKING:  # annotations only
    import numpy as np

    from sr.io import DecodedImage


def request_formats() -> tuple[str, ...]:
    """Output formats a client may ask for (sr.io's writable formats by either name), plus "same":
    the source's format when it is writable, else PNG."""
    names = (n for f in FORMATS.values() if f.writable for n in (f.user_name, f.name))
    return (*dict.fromkeys(names), "same")


def mime_types() -> dict[str, str]:
    """MIME type of each output format, by the name :func:`output_format` returns."""
    return {f.user_name: f.mime for f in FORMATS.values() if f.writable}


class NoBudgetMapError(ValueError):
    pass


class WorkLimitError(ValueError):
    """The request asks for more output pixels or work than the server allows (-> 422)."""


@dataclass
class JobRequest:
    """One upload's job: its bytes, what it asks for (validated), and this server's limits on it."""

    data: bytes
    request: UpscaleRequest  # size, format and quality, tta, budget map (model/denoise/look: the engine's)
    max_pixels: int
    budget_k_max: float | None = None  # heat-map scale: the model's k_max, so maps compare across images
    max_output_pixels: int | None = None
    max_work_pixels: int | None = None
    keep_budget_map: bool = False  # also return the budget map's colour levels with the image
    stop: threading.Event = field(default_factory=threading.Event)  # set when the request gives up
    # decode(data, max_pixels=...): the service's sandboxed decode (service/sandbox.py); None:
    # sr.io.read_image in this process
    decode: Callable[..., DecodedImage] | None = None
    # (width, height) the admitted plan is for: the header's; the decode plans again only if it differs
    planned_size: tuple[int, int] | None = None
    submitted: float = field(default_factory=time.perf_counter)
    # network cost per output pixel of the model and of its pre model, relative to the model the
    # work model is calibrated on (ModelHub.cost): 1.0 for the weights folder's families
    cost: tuple[float, float] = (1.0, 0.0)
    teaches: bool = True  # whether its time teaches the work model (ModelHub.calibrated)

    def should_stop(self) -> bool:
        """Whether to give up now: polled between stages, by the engine and by the decoder."""
        return self.stop.is_set()


@dataclass
class JobResult:
    body: bytes
    fmt: str                  # png | jpg | webp
    model: str
    scale: int
    size: tuple[int, int]     # output (width, height)
    timings_ms: dict[str, float]
    choice: str = ""          # model "auto": what it chose and why, e.g. "auto: photo (JPEG, quality ~72)"
    budget_levels: np.ndarray | None = None  # keep_budget_map: uint8 (H, W) heat-map levels

    def network_seconds(self) -> float:
        """Seconds the engine ran: what teaches the job pool the network's current speed."""
        return self.timings_ms.get("upscale", 0.0) / 1e3


def form_request(
    hub: ModelCatalog, model: str | None, *, scale: int | None, outscale: float | None, width: int | None,
    height: int | None, fmt: str, quality: int, budget_map: bool, tta: bool, denoise: float | None,
    look: float | None = None, pre: str | None = None,
) -> tuple[str, UpscaleRequest]:
    """(family, the validated request) from an upload's form fields; :class:`InvalidRequestError`
    saying why not. The model is a catalogue name (photo-x2 implies scale 2), ``pre`` the name of a
    1x restoration model of the models folder (never a path); every other value is checked by
    :meth:`UpscaleRequest.validate`, the check the CLI's arguments get, in the same words."""
    try:
        family, implied = hub.resolve(model)
        pre = hub.resolve_pre(pre)
    except (UnknownModelError, ValueError) as e:
        raise InvalidRequestError(str(e)) from None
    if implied is not None and scale is not None and scale != implied:
        raise InvalidRequestError(f"model {model!r} is a x{implied} model but scale={scale} was asked")
    request = UpscaleRequest(scale=scale if scale is not None else implied, outscale=outscale, width=width,
                             height=height, model=hub.request_model(family), denoise=denoise, look=look,
                             tta=tta, format=fmt, quality=quality, budget_map=budget_map, pre=pre)
    try:
        request = request.validate()
    except ValueError as e:
        raise InvalidRequestError(str(e)) from None
    if request.look and not hub.takes_look(family):  # photo or auto, but no photo-natural here
        raise InvalidRequestError(f"look needs {NATURAL_MODEL} weights, which this server does not "
                                  f"have (GET /v1/models: look)")
    return family, request


def engine_for(hub: ModelHub, family: str, request: UpscaleRequest) -> Upscaler:
    return hub.engine_for(family, request)


def run_job(engine: Upscaler, req: JobRequest) -> JobResult:
    """Decode, upscale, encode: the admitted job (its work planned once at admission, and again by
    the service's decode only where the decoded size differs from the header's)."""
    from sr.io import encode_image, read_image

    t0 = time.perf_counter()
    _check_stop(req)
    img = (req.decode or read_image)(req.data, max_pixels=req.max_pixels)
    _check_stop(req)
    t1 = time.perf_counter()
    # source: the upload's bytes, from which model "auto" tells lossy from lossless; quantize: the
    # output as 8/16-bit samples, what the encoder takes, without a full-size float32 copy
    asked = req.request
    res = engine.run(img, asked, budget_map=req.keep_budget_map, should_stop=req.should_stop, source=req.data,
                     quantize=True)
    _check_stop(req)
    t2 = time.perf_counter()
    if asked.budget_map:
        if res.budget_map is None:
            raise NoBudgetMapError(f"model {res.model} has no adaptive attention blocks: no budget map")
        fmt, body = "png", heatmap_png(res.budget_map, req.budget_k_max)
    else:
        fmt = output_format(asked.format, img.format)
        body = encode_image(res.image, format=fmt, quality=asked.quality)
    t3 = time.perf_counter()
    levels = None
    if req.keep_budget_map and not asked.budget_map and res.budget_map is not None:
        from sr.inference.heatmap import budget_levels

        levels = budget_levels(res.budget_map, req.budget_k_max)
    out = res.image
    return JobResult(
        body=body, fmt=fmt, model=res.model, scale=res.scale, size=(out.width, out.height),
        choice=res.choice.describe() if res.choice is not None else "", budget_levels=levels,
        timings_ms={"queue": (t0 - req.submitted) * 1e3, "decode": (t1 - t0) * 1e3,
                    "upscale": (t2 - t1) * 1e3, "encode": (t3 - t2) * 1e3},
    )


def _check_stop(req: JobRequest) -> None:
    if req.should_stop():
        raise JobStopped("job stopped: the request gave up")


def plan_work(engine: Upscaler, width: int, height: int, req: JobRequest) -> tuple[tuple[int, int], Work]:
    """((out_w, out_h), the job's :class:`Work`) for ``req`` on a width x height input, without doing
    any work: the engine's own plan (:meth:`sr.inference.Upscaler.plan`), its tiling included.

    The limit is on work pixels: the pixels the network produces, summed over its passes (a pass on
    a bigger image costs more), times 8 with tta. Raises :class:`WorkLimitError` over the request's
    limits, and ``UpscaleError`` for arguments the engine refuses.
    """
    plan = engine.plan(height, width, req.request)
    tta = req.request.tta
    out_h, out_w = plan.out_size
    asked = f"{out_w}x{out_h} output"
    if req.max_output_pixels is not None and out_w * out_h > req.max_output_pixels:
        raise WorkLimitError(
            f"{asked} is {out_w * out_h / 1e6:.1f} megapixels, over this server's limit of "
            f"{req.max_output_pixels / 1e6:.1f} (SR_MAX_OUTPUT_PIXELS); ask for a smaller scale, outscale, "
            "width or height")
    if req.max_work_pixels is not None and plan.work_pixels > req.max_work_pixels:
        how = f"passes x{' x'.join(map(str, plan.passes))}" + (", x8 for tta" if tta else "")
        raise WorkLimitError(
            f"{asked} needs {plan.work_pixels / 1e6:.1f} megapixels of network work ({how}), over this "
            f"server's limit of {req.max_work_pixels / 1e6:.1f} (SR_MAX_WORK_PIXELS); "
            "ask for a smaller output"
            + (" or turn tta off" if tta else ""))
    model_cost, pre_cost = req.cost
    pre_pixels = width * height * (8 if tta else 1) if req.request.pre else 0  # its overlaps: the model's
    tiled = (plan.tiled_pixels - pre_pixels) * model_cost + pre_pixels * pre_cost
    work = Work(forwards=plan.tiles, tiled_mp=tiled / 1e6, io_mp=(width * height + out_w * out_h) / 1e6)
    return (out_w, out_h), work


def output_format(requested: str, source: str | None) -> str:
    """The output format's user name (png, jpg, webp) for a requested name or "same"."""
    if requested == "same":
        return same_format(source)
    row = writable_format_for(requested)
    if row is None:
        raise KeyError(requested)
    return row.user_name


class BudgetMapStore:
    """The budget maps of recent results, as heat-map levels (1 byte per input pixel), so that the
    page shows a result's map without a second upscale. Bounded in bytes; the oldest go
    first; ids are unguessable, and the routes that use them need the API key anyway."""

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


def result_headers(result: JobResult, job: JobRequest, upload_name: str | None,
                   timings_ms: dict[str, float]) -> dict[str, str]:
    """The answer's headers: the download's name by the CLI's naming rule (sr.request: decided by
    the request, e.g. width-only -> _w800), timings, the model that ran and the output's size."""
    suffix = job.request.output_suffix(result.scale)
    headers = {
        "Content-Disposition": f'attachment; filename="{download_name(upload_name, suffix, result.fmt)}"',
        "Server-Timing": ", ".join(f"{k};dur={v:.1f}" for k, v in timings_ms.items()),
        "X-Model": result.model,
        **({"X-Model-Choice": result.choice} if result.choice else {}),
        "X-Scale": str(result.scale),
        "X-Image-Size": f"{result.size[0]}x{result.size[1]}",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
    }
    if job.request.budget_map and job.budget_k_max:
        headers["X-Budget-Max"] = f"{job.budget_k_max:g}"  # the heat map's brightest colour
    return headers


def download_name(upload_name: str | None, suffix: str, ext: str) -> str:
    """A safe file name from the client's: no directories, ASCII letters/digits/._- only, bounded."""
    base = PurePosixPath((upload_name or "").replace("\\", "/")).name
    stem = base.rsplit(".", 1)[0] if "." in base else base
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._-")[:80] or "image"
    return f"{stem}{suffix}.{ext}"
