"""The SR network, its attention family and the preset registry."""

from .attention import ATTENTION_PATHS, set_attention_path
from .network import NetConfig, SRNet
from .registry import DEFAULT_PRESET, PRESETS, build_config, build_model, count_macs, count_params, parse_name

__all__ = [
    "ATTENTION_PATHS",
    "DEFAULT_PRESET",
    "PRESETS",
    "NetConfig",
    "SRNet",
    "build_config",
    "build_model",
    "count_macs",
    "count_params",
    "parse_name",
    "set_attention_path",
]
