"""Batch upscaling of files, folders and globs: ``sr upscale``, usable from Python.

``run_batch(BatchOptions(inputs=("photos/",), output="out"))`` lists the inputs, plans the outputs,
checks the output folder, then runs read -> upscale -> write on local threads or on Ray Data.
"""

from .options import BatchOptions
from .run import run_batch

__all__ = ["BatchOptions", "run_batch"]
