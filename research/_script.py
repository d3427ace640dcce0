"""How a research script runs: its flags, then its work under the sr CLI's conduct (one line per
error, never a traceback; sr.cli.guarded)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from sr.cli import guarded


def run_script(
    doc: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int | None],
    argv: list[str] | None,
    prog: str,
) -> int:
    """Parse ``argv`` with the script's flags and run it; the exit code."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").strip().splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return guarded(prog, lambda: run(args))
