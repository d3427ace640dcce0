"""Sub-commands of the ``sr`` CLI: each module has ``add_arguments(parser)`` and ``run(args)``."""
