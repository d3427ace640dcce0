"""Benchmarks behind ``sr bench``: each module has ``add_arguments(parser)`` and ``run(args)``."""
