"""The model an evaluation scores: shipped or file weights checked against the scale, the attention
budget and number type applied, wrapped as the :data:`~.protocol.UpscaleFn` the protocol calls."""

from __future__ import annotations

from pathlib import Path

import torch

from ..descriptor import ModelDescriptor
from ..inference.precision import (
    PrecisionError,
    choose_external_dtype,
    precision_name,
    record_name,
    resolve_dtype,
)
from ..shipped import is_model_path
from ..weights import WeightsError, find_models, loaded
from .protocol import UpscaleFn, model_upscaler
from .sets import EvaluationError


def load_model(
    name: str, scale: int, device: torch.device, tta: bool = False, budget: float | None = None,
    precision: str = "fp32", weights_dir: str | Path | None = None,
) -> tuple[UpscaleFn, str]:
    """(upscale function, one-line description) for a model name, family or weights file (names are
    looked up in ``weights_dir``, default: the shipped weights).

    ``budget`` overrides the adaptive attention's mean number of key regions per query region.
    ``precision``: the network's dtype, as the engine resolves it for this model (auto included).
    Raises :class:`EvaluationError` for weights that are missing, of another scale, or that do not
    take the budget or precision asked for.
    """
    try:
        # a file, a model name, or a family (asa-deep: each scale)
        family, found = find_models(name, weights_dir)
        if scale not in found:
            (only,) = found.values() if len(found) == 1 else (None,)
            if only is not None and (only.path.stem == family or is_model_path(name)):
                raise EvaluationError(f"{only.path} is a x{only.scale} model but --scale is {scale}")
            have = ", ".join(f"x{s}" for s in sorted(found))
            raise EvaluationError(f"{family} has no x{scale} model (it has {have})")
        model = loaded(found[scale])
    except WeightsError as e:
        raise EvaluationError(f"{e} (or use --model bicubic)") from None
    if budget is not None:
        set_budget(model, budget)
    try:
        if model.own:
            dtype = resolve_dtype(precision, device, [record_name(model)])
        else:  # another architecture: what spandrel states and the first-use bf16 check say
            dtype = choose_external_dtype(model, precision, device)[0]
    except PrecisionError as e:
        raise EvaluationError(str(e)) from None
    net = model.net.to(device=device, dtype=dtype)
    # the model's own name (asa-base-x2), not its training run's in the metadata (x2-extra)
    extras = ", x8 self-ensemble" if tta else ""
    extras += f", {precision_name(dtype)}" if dtype != torch.float32 else ""
    extras += f", attention budget {budget:g}" if budget is not None else ""
    arch = "" if model.own else f"{model.architecture}, "
    desc = f"{model.name} ({arch}{model.path}, {model.params:,} params, {device}{extras})"
    return model_upscaler(net, device, tta, dtype), desc


def set_budget(model: ModelDescriptor, budget: float) -> None:
    """Set every adaptive attention block's target budget (0 = attention skipped everywhere), within
    the budget cap the model's descriptor states; :class:`EvaluationError` otherwise."""
    if model.k_max is None or not model.net.adaptive_blocks():
        raise EvaluationError("--budget needs a model with adaptive attention")
    if not 0 <= budget <= model.k_max:
        raise EvaluationError(f"--budget must be between 0 and the model's k_max {model.k_max:g}, "
                              f"got {budget:g}")
    model.net.set_attention_budget(budget)
