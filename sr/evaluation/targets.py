"""Degraded evaluation sets to build or reuse: one per (HR folder, level), every folder checked
before any set is written (:func:`plan_degraded`), then built (:func:`build_targets`). ``sr degrade``
and ``sr eval --degrade`` share both, so they make and reuse the same layout."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..io import ImageError
from .degraded import build_degraded_set, existing_set, levels_for, set_folder_name
from .protocol import set_name
from .sets import EvaluationError, plan_sets

MAX_SCALE = 8  # as bicubic evaluation's


@dataclass
class DegradedTarget:
    hr_dir: Path
    level: str
    out: Path
    existing: dict | None  # the manifest of the very same set already there (kept as it is), else None


# called with (target, its manifest) once a target is built or found intact
OnBuilt = Callable[[DegradedTarget, dict], None]


def parse_levels(choice: str, flag: str = "--level") -> list[str]:
    """``mild``, ``mild,heavy`` or ``all`` as levels; :class:`EvaluationError` naming ``flag``."""
    try:
        return levels_for(choice)
    except ValueError as e:
        raise EvaluationError(f"{flag}: {e}") from None


def plan_degraded(
    hr_dirs: list[str], levels: list[str], scale: int, root: str | Path, seed: int
) -> list[DegradedTarget]:
    """Check everything before anything is written: the HR folders (readable images, large enough
    to score), distinct set names, and each target folder (absent, empty, or the very same set)."""
    if not 2 <= scale <= MAX_SCALE:
        raise EvaluationError(f"--scale must be between 2 and {MAX_SCALE}, got {scale}")
    if seed < 0:
        raise EvaluationError(f"--seed must be 0 or more, got {seed}")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise EvaluationError(f"{root} exists and is not a folder")
    plan_sets(hr_dirs, None, scale)
    names = [set_name(d) for d in hr_dirs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise EvaluationError(f"several --hr folders are named {dup[0]!r}: their sets would share a "
                              "folder (give them distinct names)")
    targets = []
    for hr_dir in hr_dirs:
        for level in levels:
            out = root / set_folder_name(hr_dir, level, scale)
            try:
                existing = existing_set(hr_dir, out, scale, level, seed)
            except (ValueError, OSError) as e:
                raise EvaluationError(str(e)) from None
            targets.append(DegradedTarget(Path(hr_dir), level, out, existing))
    return targets


def build_targets(
    targets: list[DegradedTarget], scale: int, seed: int, on_built: OnBuilt | None = None
) -> list[dict]:
    """Build the targets not yet there (each written whole or not at all); their manifests in order.
    Sets the plan found intact are taken as planned, not checked a second time."""
    manifests = []
    for t in targets:
        try:
            manifest = t.existing or build_degraded_set(t.hr_dir, t.out, scale, t.level, seed)
        except (ValueError, ImageError, OSError) as e:
            raise EvaluationError(f"{t.out}: {e}") from None
        manifests.append(manifest)
        if on_built is not None:
            on_built(t, manifest)
    return manifests


def describe_built(target: DegradedTarget, manifest: dict) -> str:
    """One line for a built or kept set: "wrote OUT: 5 images, JPEG q35-80, 2 PNG, 120 KiB"."""
    files = manifest["files"]
    size = sum((target.out / f["lr"]).stat().st_size for f in files)
    what = "kept" if target.existing else "wrote"  # kept: the same set, from the same images and seed
    return f"{what} {target.out}: {len(files)} images, {_kinds(files)}, {size / 1024:.0f} KiB"


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
