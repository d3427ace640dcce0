"""sr: image super-resolution with adaptive sparse attention."""

__version__ = "0.1.0"
