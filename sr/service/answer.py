"""What a request is answered with (:class:`Answer`: the body, its MIME type and headers), and the
headers of an upscale's answer (:func:`result_headers`): the download's file name by the CLI's naming
rule, the stages' timings, the model that ran and the output's size."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from .planning import UpscaleJob
    from .running import JobResult

# Headers of every image answer.
NO_SNIFF_NO_STORE = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}


@dataclass(frozen=True)
class Answer:
    """A request's answer: the route sends it as it is."""

    body: bytes
    media_type: str
    headers: dict[str, str]


def result_headers(result: JobResult, job: UpscaleJob, upload_name: str | None,
                   total_ms: float) -> dict[str, str]:
    """The answer's headers: the download's name by the CLI's naming rule (sr.request: decided by
    the request, e.g. width-only -> _w800), timings (the stages', then ``total_ms``), the model that
    ran and the output's size."""
    suffix = job.request.output_suffix(result.scale)
    timings = {**result.times.by_stage(), "total": total_ms}
    headers = {
        "Content-Disposition": f'attachment; filename="{download_name(upload_name, suffix, result.fmt)}"',
        "Server-Timing": ", ".join(f"{k};dur={v:.1f}" for k, v in timings.items()),
        "X-Model": result.model,
        **({"X-Model-Choice": result.choice} if result.choice else {}),
        "X-Scale": str(result.scale),
        "X-Image-Size": f"{result.size[0]}x{result.size[1]}",
        **NO_SNIFF_NO_STORE,
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
