"""Batch upscaling of files, folders and globs: ``sr upscale``, usable from Python.

``run_batch(BatchOptions(inputs=("photos/",), output="out"))`` lists the inputs, plans the outputs,
checks the output folder, then runs read -> upscale -> write on local threads or on Ray Data.
"""

from .errors import BatchError
from .options import BatchOptions
from .run import run_batch
from .stages import make_upscaler

__all__ = ["BatchError", "BatchOptions", "make_upscaler", "run_batch"]
