"""sr: image super-resolution with adaptive sparse attention."""

__version__ = "0.1.0"

# The shipped family the CLI, the engine and the service load when no model is named.
DEFAULT_MODEL = "asa-base"
