"""sr: image super-resolution with adaptive sparse attention."""

__version__ = "0.1.0"

# The shipped family the CLI, the engine and the service load when no model is named.
DEFAULT_MODEL = "asa-base"
# The family fine-tuned from DEFAULT_MODEL on degraded inputs (blur, noise, JPEG): `--model photo`,
# the lossy side of `auto`, and the far end of `--denoise` (0 = DEFAULT_MODEL, 1 = PHOTO_MODEL).
PHOTO_MODEL = "photo"
# `--model auto`: per input file, PHOTO_MODEL for lossy files (JPEG, lossy WebP), DEFAULT_MODEL for
# the rest, read from the file's own bytes (sr.inference.model_choice).
AUTO_MODEL = "auto"
# What `sr upscale`, `sr serve` and `Upscaler()` use when no model is named. The one switch for making
# auto the default: set it to AUTO_MODEL.
DEFAULT_CHOICE = DEFAULT_MODEL
