"""Training: config, loop (EMA, checkpoints, validation, DDP) and export."""

from .config import TrainConfig, load_config

__all__ = ["TrainConfig", "load_config"]
