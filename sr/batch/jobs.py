"""The job list: inputs found from files, folders and globs, each with its planned output path.

Everything here runs on the driver before any image is decoded: which files, which output names,
what is skipped, what collides, and whether the output folder can be written at all.
"""

from __future__ import annotations

import glob
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..request import same_format as request_same_format
from .errors import BatchError
from .options import BatchOptions

# The problem of an input that names nothing on disk.
MISSING = "no such file or folder"
# Why an existing input gave no job (named when nothing at all was found).
NO_MATCH = "no image or video matches this pattern"
EMPTY_FOLDER = "no images or videos in this folder"


@dataclass
class Job:
    src: Path
    rel: Path  # output path relative to OUTDIR, before suffix and extension
    out: Path | None = None
    budget: Path | None = None
    problem: str | None = None  # known before reading: missing, collision, output exists
    skip: bool = False


def same_format(src: Path) -> str:
    """``-f same``: the input's format when sr.io writes it (by its suffix, before reading), else png."""
    return request_same_format(src.suffix)


def output_format(job: Job, fmt: str) -> str:
    """The format ``job`` is written in: ``fmt``, or with "same" its input's."""
    return same_format(job.src) if fmt == "same" else fmt


def why_nothing(path: Path, recursive: bool) -> str:
    """Why an existing input named nothing to read: a glob without matches, or a folder without
    inputs (whose subfolders, without ``recursive``, are not read)."""
    if not path.is_dir():
        return NO_MATCH
    if not recursive and any(p.is_dir() and not p.name.startswith(".") for p in path.iterdir()):
        return f"{EMPTY_FOLDER}, and without -r its subfolders are not read"
    return EMPTY_FOLDER


def collect_inputs(
    inputs: list[str] | tuple[str, ...], recursive: bool, outdir: Path | None = None,
    unmatched: list[str] | None = None,
) -> list[Job]:
    """Files, folders and globs -> jobs in a stable order (duplicates dropped). Folder scans skip
    hidden files and anything inside ``outdir`` (earlier outputs are not new inputs). ``unmatched``,
    when given, receives 'INPUT: why' for each input that named nothing to read (a missing path, a
    glob that matches nothing, a folder without images), in the inputs' order."""
    from ..io import read_suffixes
    from ..video import VIDEO_SUFFIXES

    # picked up when scanning folders (files named explicitly are always tried)
    suffixes = read_suffixes() | VIDEO_SUFFIXES
    out_resolved = outdir.resolve() if outdir is not None else None
    jobs: list[Job] = []
    seen: set[Path] = set()
    found_here = [0]  # inputs the current item named (duplicates of earlier items included)

    def add(src: Path, rel: Path, problem: str | None = None) -> None:
        found_here[0] += problem is None
        key = src.resolve() if problem is None else src
        if key not in seen:
            seen.add(key)
            jobs.append(Job(src, rel, problem=problem))

    def scan(folder: Path) -> None:
        found = folder.rglob("*") if recursive else folder.iterdir()
        nested_out = out_resolved is not None and folder.resolve() in out_resolved.parents
        for f in sorted(found):
            rel = f.relative_to(folder)
            hidden = any(part.startswith(".") for part in rel.parts)  # incl. our own temp files
            if nested_out and out_resolved in f.resolve().parents:
                continue
            if f.is_file() and not hidden and f.suffix.lower() in suffixes:
                add(f, rel if recursive else Path(f.name))

    for item in inputs:
        path = Path(item).expanduser()
        found_here[0] = 0
        if path.is_file():
            add(path, Path(path.name))
        elif path.is_dir():
            scan(path)
        elif glob.has_magic(item):
            for match in sorted(glob.glob(item, recursive=recursive)):
                m = Path(match)
                if m.is_file():
                    add(m, Path(m.name))
                elif m.is_dir():
                    scan(m)
        else:
            add(path, Path(path.name), problem=MISSING)
            if unmatched is not None:
                unmatched.append(f"{item}: {MISSING}")
            continue
        if not found_here[0] and unmatched is not None:
            unmatched.append(f"{item}: {why_nothing(path, recursive)}")
    return jobs


def default_suffix(opts: BatchOptions, default_scale: int) -> str:
    """The request's output suffix (sr.request.UpscaleRequest.output_suffix: the service's rule too)."""
    return opts.request.output_suffix(default_scale)


def plan_outputs(jobs: list[Job], outdir: Path, suffix: str, opts: BatchOptions) -> None:
    """Fill each job's output path and decide skip/problem; refuse any output that is an input."""
    from ..io import suffix_for
    from ..video import is_video
    from ..video.settings import output_suffix

    inputs = {j.src.resolve(): j.src for j in jobs if j.problem is None}
    taken: dict[Path, Path] = {}
    for job in jobs:
        if job.problem is not None:
            continue
        video = is_video(job.src)
        extension = (output_suffix(job.src, opts.video_codec) if video
                     else suffix_for(output_format(job, opts.request.format)))
        job.out = outdir / job.rel.parent / f"{job.rel.stem}{suffix}{extension}"
        job.budget = (job.out.with_name(f"{job.out.stem}_budget.png")
                      if opts.save_budget_map and not video else None)
        for target in (job.out, job.budget):
            if target is not None and target.resolve() in inputs:
                raise BatchError(
                    "refusing to run: {target} would overwrite the input {src}; "
                    "choose another output folder or {suffix}", target=target, src=inputs[target.resolve()],
                )
        key = job.out.resolve()
        if key in taken:
            job.problem = f"output {job.out} is also the output of {taken[key]}"
            continue
        taken[key] = job.src
        exists = job.out.exists() or (job.budget is not None and job.budget.exists())
        if exists and opts.skip_existing:
            job.skip = True
        elif exists and not opts.overwrite:
            job.problem = (f"output {job.out} exists (use {opts.option_name('overwrite')} or "
                           f"{opts.option_name('skip_existing')})")


def prepare_output_folder(outdir: Path) -> None:
    """Create ``outdir`` and prove it writable by writing a file there, before any image is computed:
    a folder that cannot hold the outputs is one line and exit 1, not a failure per image at the end.
    (Permission bits alone do not tell: read-only mounts, ACLs and root all disagree with them.)"""
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BatchError("cannot create output folder {outdir} ({why})", 1, outdir=outdir,
                         why=e.strerror or e) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".sr-write-check-", dir=outdir)  # hidden: never an input
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise BatchError("cannot write to output folder {outdir} ({why})", 1, outdir=outdir,
                         why=e.strerror or e) from None
