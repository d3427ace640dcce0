"""Training: config, the loop, its step (learner; gan: the discriminator's part), checkpoints,
validation, the --init weights, the DDP processes, and export."""

from .config import TrainConfig, load_config

__all__ = ["TrainConfig", "load_config"]
