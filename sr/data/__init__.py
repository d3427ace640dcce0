"""Training data: HR folders -> cached bicubic LR -> random aligned, augmented patches."""

from .patches import PatchDataset, PatchSampler, build_pairs, check_rescale, check_rgb_perm

__all__ = ["PatchDataset", "PatchSampler", "build_pairs", "check_rescale", "check_rgb_perm"]
