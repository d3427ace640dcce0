"""sr: image super-resolution with adaptive sparse attention."""

__version__ = "0.1.0"

# The shipped family the CLI, the engine and the service load when no model is named.
DEFAULT_MODEL = "asa-base"
# The family fine-tuned from DEFAULT_MODEL on degraded inputs (blur, noise, JPEG): `--model photo`,
# the lossy side of `auto`, and the far end of `--denoise` (0 = DEFAULT_MODEL, 1 = PHOTO_MODEL).
PHOTO_MODEL = "photo"
# The GAN fine-tune of PHOTO_MODEL (same architecture): natural texture over fidelity. A family of its
# own (`--model photo-natural`) and the far end of `--look` (0 = PHOTO_MODEL as trained, 1 = this).
NATURAL_MODEL = "photo-natural"
# `--model auto`: per input file, PHOTO_MODEL for lossy files (JPEG, lossy WebP), DEFAULT_MODEL for
# the rest, read from the file's own bytes (sr.inference.model_choice).
AUTO_MODEL = "auto"
# ...except JPEGs and lossy WebPs of this estimated quality and above, which go to DEFAULT_MODEL: on
# clean valid LR saved as JPEG, PHOTO_MODEL wins at q90 and loses at q95 at every scale; the linear
# crossing lies at q93.2 / 93.8 / 94.0 (x3 / x2 / x4) (docs/photo.md, "--model auto").
NEAR_LOSSLESS_QUALITY = 94
# What `sr upscale`, `sr serve` and `Upscaler()` use when no model is named: auto, since on every
# measured set it equals DEFAULT_MODEL on lossless files and beats it on lossy ones (docs/photo.md).
DEFAULT_CHOICE = AUTO_MODEL

__all__ = [
    "AUTO_MODEL",
    "DEFAULT_CHOICE",
    "DEFAULT_MODEL",
    "NATURAL_MODEL",
    "NEAR_LOSSLESS_QUALITY",
    "PHOTO_MODEL",
    "__version__",
]
