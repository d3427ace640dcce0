"""``sr`` command line: one sub-command per module in ``sr.commands``; errors become messages."""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from . import __version__
from .commands.bench import BENCHMARKS  # names only: each benchmark's module loads when it runs
from .errors import CLIError

# guarded: how any `sr`-style program (the research scripts too) turns errors into one-line messages
__all__ = ["build_parser", "guarded", "main"]

# name -> (module in sr.commands, one-line help). Modules are imported lazily so `sr --help` is fast.
COMMANDS: dict[str, tuple[str, str]] = {
    "upscale": ("upscale", "upscale images, folders or globs"),
    "eval": ("evaluate", "PSNR/SSIM of a model or bicubic on HR image folders"),
    "degrade": ("degrade", "build seeded degraded LR sets (web, mild, medium, heavy, chain) from HR folders"),
    "train": ("train", "train a model (config file and/or flags)"),
    "export": ("export", "export a training checkpoint's EMA weights to safetensors"),
    "info": ("info", "architecture, params and MACs of a model name or weights file"),
    "serve": ("serve", "run the HTTP service (FastAPI + web page)"),
    "bench": ("bench", f"benchmarks: {', '.join(BENCHMARKS)}"),
}


# Commands whose torch thread teams share the CPU with other threads of their own process (the
# service's event loop, decoders, encoders and other workers; sr upscale's reader and writer).
# libgomp's default wait policy keeps a team's threads spinning after every parallel region;
# measured on a loaded 2-core machine (docs/inference.md, "Engines sharing the CPU"), a 1-worker,
# 2-thread service then did 1.0 req/s or timed out, against 5.6 req/s with OMP_WAIT_POLICY=PASSIVE,
# and sr upscale --threads 2 ran at 0.6-0.8 output MP/s against 2.5-3.3. libgomp reads the variable
# when torch is first imported, so it is set before anything is; a value the user set is kept.
PASSIVE_OMP_COMMANDS = frozenset({"serve", "upscale"})


def prepare_environment(command: str | None) -> None:
    """Environment that must be in place before torch loads, for ``command``."""
    if command in PASSIVE_OMP_COMMANDS:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# Exit codes, the same for every command: the same class of problem always exits the same way.
EXIT_CODES = """exit codes:
  0    done (every input written or skipped)
  1    the run failed: some inputs could not be read or written, or the output folder, the
       device or the cluster refused the work
  2    nothing was done: a bad argument, an unknown model or scale, or no input found
  130  interrupted (Ctrl-C); outputs already written are complete files"""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an argument error is one line (the usage block buried it) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None, argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The full parser for ``command`` (others listed by name only, so `sr --help` imports nothing).
    A command whose own sub-parsers are built lazily (``sr bench WHAT``) is given ``argv``."""
    parser = OneLineParser(
        prog="sr", description="Image super-resolution with adaptive sparse attention.",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sr {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == command:
            add = importlib.import_module(f"sr.commands.{module}").add_arguments
            if "argv" in inspect.signature(add).parameters:
                add(p, argv=argv)
            else:
                add(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    prepare_environment(command)
    parser = build_parser(command, argv)
    args = parser.parse_args(argv)
    module = importlib.import_module(f"sr.commands.{args._module}")
    return guarded(f"sr {args.command}", lambda: module.run(args))


def guarded(prog: str, call: Callable[[], int | None]) -> int:
    """Run a command's ``call`` as ``prog``: its exit code; a CLIError is its one-line message and
    code, Ctrl-C is 130, a reader that left early is a quiet 1. Never a traceback for these."""
    try:
        code = int(call() or 0)
        sys.stdout.flush()  # a closed pipe raises here, in the handler below, not at interpreter exit
        return code
    except CLIError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader left (`sr info ... | head`): stop quietly, and point stdout at devnull so that
        # the interpreter's final flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    # `python -m sr.cli`: this copy of the module parses as the package's does (argv is passed down,
    # no module state to share between the two copies).
    sys.exit(main())
