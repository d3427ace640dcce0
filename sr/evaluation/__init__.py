"""Evaluation: the scoring protocol (:mod:`.protocol`), HR/LR sets planned and scored (:mod:`.sets`,
:mod:`.scoring`), the model scored (:mod:`.model`), results as files (:mod:`.results`) and seeded
degraded sets (:mod:`.degraded`, :mod:`.targets`).

Used by ``sr eval``, ``sr degrade`` and by validation during training, so all report the same numbers.
"""

from .model import load_model, set_budget
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
from .results import BLIND_LEVELS, BlindMean, blind_means, results_csv, results_json, write_file
from .scoring import OnImage, save_png, score_set
from .sets import EvaluationError, SetPlan, SetResult, lr_key, match_lr, plan_sets, score_pairs, set_names
from .targets import DegradedTarget, build_targets, describe_built, parse_levels, plan_degraded

__all__ = [
    "BLIND_LEVELS",
    "GENERIC_DIR_NAMES",
    "BlindMean",
    "DegradedTarget",
    "EvaluationError",
    "ImageScore",
    "OnImage",
    "SetPlan",
    "SetResult",
    "UpscaleFn",
    "bicubic_y_baseline",
    "blind_means",
    "build_targets",
    "describe_built",
    "evaluate_folder",
    "exact_fp32",
    "list_images",
    "load_hr",
    "load_model",
    "load_rgb_pair",
    "lr_key",
    "make_lr",
    "match_lr",
    "model_upscaler",
    "parse_levels",
    "plan_degraded",
    "plan_sets",
    "results_csv",
    "results_json",
    "save_png",
    "score_image",
    "score_lr",
    "score_pairs",
    "score_set",
    "set_budget",
    "set_name",
    "set_names",
    "write_file",
]
