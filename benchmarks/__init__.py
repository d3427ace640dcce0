"""Benchmarks behind ``sr bench``: each module has ``add_arguments(parser)`` and ``run(args)``.

They live in the checkout beside research/, not in the wheel (setup.py packages sr only); ``sr bench``
(sr/commands/bench.py) finds them in the checkout it runs from (docs/benchmarks.md)."""
