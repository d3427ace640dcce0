"""The size plan of an upscale: output size from scale / outscale / width / height, and the chain of
model passes that reaches it (then a MATLAB-bicubic resize to the exact size).

How an output size is asked for is checked by :func:`sr.request.check_output_size`, the request's own
rule (a Python caller's values get the same sentences as the CLI's and the service's); what only the
engine knows is checked here: its scales and its output limits.
"""

from __future__ import annotations

import itertools
import math

from ..request import MAX_OUTPUT_PIXELS, RequestError, check_output_size
from .errors import UpscaleError

MAX_PASSES = 8
# MAX_OUTPUT_PIXELS (2**28, from sr.request, whose caps on outscale/width/height follow from it): a
# hard stop for absurd requests (1x1 -> outscale 1e5): the float32 output alone would not fit.


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


def check_scale(scale: object, scales: list[int], model: str) -> int:
    """``scale`` as one of ``scales`` (the engine's, of ``model``); UpscaleError otherwise."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale != int(scale):
        raise UpscaleError(f"scale must be one of {scales}, got {scale!r}")
    if int(scale) not in scales:
        raise UpscaleError(
            f"scale {int(scale)} is not available for model {model!r} (available: "
            f"{', '.join(map(str, scales))}); use outscale for other factors"
        )
    return int(scale)


def output_size(
    h: int, w: int, scale: int | None, outscale: float | None, width: int | None, height: int | None,
    scales: list[int],
) -> tuple[tuple[int, int], float]:
    """((out_h, out_w), the factor the passes must reach) of an h x w input; ``scale`` is checked
    already (:func:`check_scale`), None for the smallest of ``scales``."""
    try:
        check_output_size(outscale, width, height)
    except RequestError as e:
        raise UpscaleError(str(e)) from None
    if outscale is not None:
        out_h, out_w = max(1, _round_half_up(h * outscale)), max(1, _round_half_up(w * outscale))
        factor = float(outscale)
    elif width is not None or height is not None:
        out_w = int(width) if width is not None else max(1, _round_half_up(w * height / h))
        out_h = int(height) if height is not None else max(1, _round_half_up(h * width / w))
        factor = max(out_h / h, out_w / w)
    else:
        s = scale if scale is not None else min(scales)
        out_h, out_w, factor = h * s, w * s, float(s)
    if out_h * out_w > MAX_OUTPUT_PIXELS:
        raise UpscaleError(
            f"output {out_w}x{out_h} is too large (limit {MAX_OUTPUT_PIXELS / 2**20:.0f} megapixels)"
        )
    return (out_h, out_w), factor


def check_intermediate(h: int, w: int, passes: list[int]) -> None:
    """UpscaleError when the model's output before the final resize would be over the limit."""
    if h * w * math.prod(passes) ** 2 > MAX_OUTPUT_PIXELS:
        raise UpscaleError(
            f"the model passes {passes} would make a {w * math.prod(passes)}x{h * math.prod(passes)} "
            f"intermediate image (limit {MAX_OUTPUT_PIXELS / 2**20:.0f} megapixels)"
        )
