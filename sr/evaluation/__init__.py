"""Evaluation: the scoring protocol (:mod:`.protocol`) and HR/LR sets planned and scored (:mod:`.sets`).

Used by ``sr eval`` and by validation during training, so both report the same numbers.
"""

from .protocol import (
    GENERIC_DIR_NAMES,
    ImageScore,
    UpscaleFn,
    bicubic_y_baseline,
    evaluate_folder,
    exact_fp32,
    list_images,
    load_hr,
    load_rgb_pair,
    make_lr,
    model_upscaler,
    score_image,
    score_lr,
    set_name,
)
from .sets import EvaluationError, SetPlan, SetResult, lr_key, match_lr, plan_sets, score_pairs, set_names

__all__ = [
    "GENERIC_DIR_NAMES",
    "EvaluationError",
    "ImageScore",
    "SetPlan",
    "SetResult",
    "UpscaleFn",
    "bicubic_y_baseline",
    "evaluate_folder",
    "exact_fp32",
    "list_images",
    "load_hr",
    "load_rgb_pair",
    "lr_key",
    "make_lr",
    "match_lr",
    "model_upscaler",
    "plan_sets",
    "score_image",
    "score_lr",
    "score_pairs",
    "set_name",
    "set_names",
]
