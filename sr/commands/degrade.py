"""``sr degrade --hr DIR [DIR ...] --scale S --level LEVEL -o OUT``: degraded evaluation sets.

One set per (HR folder, level) in ``OUT/<set>-<level>-x<S>/``: the JPEG files a user would upload and
a ``manifest.json`` of every drawn parameter and checksum (:mod:`sr.evaluation.degraded`). A set
already there from the same inputs is kept; a folder holding anything else is an error, checked for
every set before any is written (:mod:`sr.evaluation.targets`). ``sr eval --degrade`` builds and
reuses the same layout.
"""

from __future__ import annotations

import argparse

from ..errors import CLIError
from ..evaluation import EvaluationError, build_targets, describe_built, parse_levels, plan_degraded
from ..evaluation.degraded import DEFAULT_SEED, LEVEL_CHOICES
from ..evaluation.targets import MAX_SCALE


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hr", nargs="+", required=True, metavar="DIR", help="folders of HR images, one set each")
    p.add_argument("--scale", type=int, required=True, help=f"downscaling factor (2 to {MAX_SCALE})")
    p.add_argument("--level", required=True, metavar="LEVEL",
                   help=f"{', '.join(LEVEL_CHOICES)} or a comma list (mild,heavy)")
    p.add_argument("-o", "--out", required=True, metavar="OUT",
                   help="folder to write the sets into, as OUT/<set>-<level>-x<S>/")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help=f"seed of the degradations (default {DEFAULT_SEED}, as `sr eval --degrade`)")


def run(args: argparse.Namespace) -> int:
    try:
        levels = parse_levels(args.level)
        targets = plan_degraded(args.hr, levels, args.scale, args.out, args.seed)
        build_targets(targets, args.scale, args.seed,
                      lambda t, manifest: print(describe_built(t, manifest), flush=True))
    except EvaluationError as e:
        raise CLIError(str(e)) from None
    return 0
