"""One upscale job, run in a worker thread: decode -> engine -> encode, timed per stage.

Errors are mapped to HTTP status codes here, in one table (:func:`http_error`), so every endpoint
answers the same way for the same bad input.
"""

from __future__ import annotations

import io
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from fastapi import HTTPException

# Output formats a client may ask for; "same" keeps the source's format when it is one of these.
FORMAT_EXT = {"png": "png", "jpg": "jpg", "jpeg": "jpg", "webp": "webp"}
_SOURCE_FORMATS = {"PNG": "png", "JPEG": "jpg", "MPO": "jpg", "WEBP": "webp"}


class NoBudgetMapError(ValueError):
    pass


@dataclass
class JobRequest:
    data: bytes
    scale: int | None
    outscale: float | None
    width: int | None
    height: int | None
    fmt: str
    quality: int
    budget_map: bool
    max_pixels: int
    tta: bool = False
    budget_k_max: float | None = None  # heat-map scale: the model's k_max, so maps compare across images
    submitted: float = field(default_factory=time.perf_counter)


@dataclass
class JobResult:
    body: bytes
    fmt: str                  # png | jpg | webp
    model: str
    scale: int
    size: tuple[int, int]     # output (width, height)
    timings_ms: dict[str, float]


def run_job(engine: Any, req: JobRequest) -> JobResult:
    from sr.io import encode_image, read_image

    t0 = time.perf_counter()
    img = read_image(req.data, max_pixels=req.max_pixels)
    t1 = time.perf_counter()
    res = engine.upscale(img, scale=req.scale, outscale=req.outscale, width=req.width, height=req.height,
                         with_budget_map=req.budget_map, tta=req.tta)
    t2 = time.perf_counter()
    if req.budget_map:
        if res.budget_map is None:
            raise NoBudgetMapError(f"model {res.model} has no adaptive attention blocks: no budget map")
        fmt, body = "png", heatmap_png(res.budget_map, req.budget_k_max)
    else:
        fmt = output_format(req.fmt, img.format)
        body = encode_image(res.image, format=fmt, quality=req.quality)
    t3 = time.perf_counter()
    out = res.image
    return JobResult(
        body=body, fmt=fmt, model=res.model, scale=res.scale, size=(out.width, out.height),
        timings_ms={"queue": (t0 - req.submitted) * 1e3, "decode": (t1 - t0) * 1e3,
                    "upscale": (t2 - t1) * 1e3, "encode": (t3 - t2) * 1e3},
    )


def output_format(requested: str, source: str | None) -> str:
    if requested == "same":
        return _SOURCE_FORMATS.get((source or "").upper(), "png")
    return FORMAT_EXT[requested]


def heatmap_png(budget_map: Any, k_max: float | None = None) -> bytes:
    from PIL import Image

    from sr.inference import budget_heatmap

    buf = io.BytesIO()
    Image.fromarray(budget_heatmap(budget_map, k_max), "RGB").save(buf, format="PNG")
    return buf.getvalue()


def download_name(upload_name: str | None, suffix: str, ext: str) -> str:
    """A safe file name from the client's: no directories, ASCII letters/digits/._- only, bounded."""
    base = PurePosixPath((upload_name or "").replace("\\", "/")).name
    stem = base.rsplit(".", 1)[0] if "." in base else base
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._-")[:80] or "image"
    return f"{stem}{suffix}.{ext}"


def looks_like_image(data: bytes) -> bool:
    """Whether Pillow recognises one of the formats sr.io reads (415 'not an image' vs 400 'corrupt')."""
    from PIL import Image, UnidentifiedImageError

    from sr import io as sr_io

    Image.init()
    formats = [f for f in getattr(sr_io, "READ_FORMATS", Image.OPEN) if f in Image.OPEN]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Image.open(io.BytesIO(data), formats=formats).close()  # reads the header only
    except UnidentifiedImageError:
        return False
    except Exception:  # noqa: BLE001 - recognised but unreadable (truncated header, bomb, ...)
        return True
    return True


def http_error(exc: BaseException, data: bytes) -> HTTPException | None:
    """The HTTP answer for a job failure caused by the request, or None for a server fault."""
    from sr.inference import UpscaleError
    from sr.io import AnimatedImageError, ImageDecodeError, ImageEncodeError, ImageError, ImageTooLargeError

    if isinstance(exc, ImageTooLargeError):
        return HTTPException(413, detail=f"image too large: {exc}")
    if isinstance(exc, AnimatedImageError):
        return HTTPException(415, detail=f"unsupported image: {exc}")
    if isinstance(exc, ImageDecodeError):
        if looks_like_image(data):
            return HTTPException(400, detail=f"corrupt or truncated image: {exc}")
        return HTTPException(415, detail=f"not a supported image file: {exc}")
    if isinstance(exc, ImageEncodeError):  # e.g. the output is too large for JPEG/WebP
        return HTTPException(422, detail=str(exc))
    if isinstance(exc, ImageError):
        return HTTPException(400, detail=str(exc))
    if isinstance(exc, (UpscaleError, NoBudgetMapError)):
        return HTTPException(422, detail=str(exc))
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return HTTPException(503, detail="server out of memory for this image; try a smaller one",
                             headers={"Retry-After": "10"})
    return None
