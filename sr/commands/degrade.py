"""``sr degrade --hr DIR [DIR ...] --scale S --level LEVEL -o OUT``: degraded evaluation sets.

One set per (HR folder, level) in ``OUT/<set>-<level>-x<S>/``: the JPEG files a user would upload and
a ``manifest.json`` of every drawn parameter and checksum (:mod:`sr.evaluation.degraded`). A set
already there from the same inputs is kept; a folder holding anything else is an error, checked for
every set before any is written. ``sr eval --degrade`` builds and reuses the same layout.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..errors import CLIError

MAX_SCALE = 8  # as sr eval's bicubic


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..evaluation.degraded import DEFAULT_SEED, LEVEL_CHOICES

    p.add_argument("--hr", nargs="+", required=True, metavar="DIR", help="folders of HR images, one set each")
    p.add_argument("--scale", type=int, required=True, help=f"downscaling factor (2 to {MAX_SCALE})")
    p.add_argument("--level", required=True, metavar="LEVEL",
                   help=f"{', '.join(LEVEL_CHOICES)} or a comma list (mild,heavy)")
    p.add_argument("-o", "--out", required=True, metavar="OUT",
                   help="folder to write the sets into, as OUT/<set>-<level>-x<S>/")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help=f"seed of the degradations (default {DEFAULT_SEED}, as `sr eval --degrade`)")


@dataclass
class DegradedTarget:
    hr_dir: Path
    level: str
    out: Path
    existing: dict | None  # the manifest of the very same set already there (kept as it is), else None


def parse_levels(choice: str, flag: str = "--level") -> list[str]:
    from ..evaluation.degraded import levels_for

    try:
        return levels_for(choice)
    except ValueError as e:
        raise CLIError(f"{flag}: {e}") from None


def plan_degraded(
    hr_dirs: list[str], levels: list[str], scale: int, root: str | Path, seed: int
) -> list[DegradedTarget]:
    """Check everything before anything is written: the HR folders (readable images, large enough
    to score), distinct set names, and each target folder (absent, empty, or the very same set)."""
    from ..evaluation import EvaluationError, plan_sets, set_name
    from ..evaluation.degraded import existing_set, set_folder_name

    if not 2 <= scale <= MAX_SCALE:
        raise CLIError(f"--scale must be between 2 and {MAX_SCALE}, got {scale}")
    if seed < 0:
        raise CLIError(f"--seed must be 0 or more, got {seed}")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise CLIError(f"{root} exists and is not a folder")
    try:
        plan_sets(hr_dirs, None, scale)
    except EvaluationError as e:
        raise CLIError(str(e)) from None
    names = [set_name(d) for d in hr_dirs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CLIError(f"several --hr folders are named {dup[0]!r}: their sets would share a folder "
                       "(give them distinct names)")
    targets = []
    for hr_dir in hr_dirs:
        for level in levels:
            out = root / set_folder_name(hr_dir, level, scale)
            try:
                existing = existing_set(hr_dir, out, scale, level, seed)
            except (ValueError, OSError) as e:
                raise CLIError(str(e)) from None
            targets.append(DegradedTarget(Path(hr_dir), level, out, existing))
    return targets


def build_targets(targets: list[DegradedTarget], scale: int, seed: int, quiet: bool = False) -> list[dict]:
    """Build the targets not yet there (each written whole or not at all); their manifests in order.
    Sets the plan found intact are taken as planned, not checked a second time."""
    from ..evaluation.degraded import build_degraded_set
    from ..io import ImageError

    manifests = []
    for t in targets:
        try:
            manifest = t.existing or build_degraded_set(t.hr_dir, t.out, scale, t.level, seed)
        except (ValueError, ImageError, OSError) as e:
            raise CLIError(f"{t.out}: {e}") from None
        manifests.append(manifest)
        if not quiet:
            files = manifest["files"]
            size = sum((t.out / f["lr"]).stat().st_size for f in files)
            what = "kept" if t.existing else "wrote"  # kept: the same set, from the same images and seed
            print(f"{what} {t.out}: {len(files)} images, {_kinds(files)}, {size / 1024:.0f} KiB", flush=True)
    return manifests


def _kinds(files: list[dict]) -> str:
    qualities = [f["params"]["second"]["jpeg"] if f["params"].get("second") else f["params"]["jpeg"]
                 for f in files]
    jpegs = [q for q in qualities if q is not None]
    parts = []
    if jpegs:
        parts.append(f"JPEG q{min(jpegs)}-{max(jpegs)}" if min(jpegs) != max(jpegs) else f"JPEG q{jpegs[0]}")
    if len(jpegs) < len(files):
        parts.append(f"{len(files) - len(jpegs)} PNG")
    return ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    levels = parse_levels(args.level)
    targets = plan_degraded(args.hr, levels, args.scale, args.out, args.seed)
    build_targets(targets, args.scale, args.seed)
    return 0
