"""One batch from options to exit code: check, list, plan, prepare the output folder, execute, report.

The same steps for both executors; only "execute" differs (:mod:`sr.batch.local` threads, or
:mod:`sr.batch.cluster` on Ray Data, imported only for a Ray run so the local path never imports Ray).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..shipped import missing_model
from .errors import BatchError
from .jobs import MISSING, Job, collect_inputs, default_suffix, plan_outputs, prepare_output_folder
from .options import BatchOptions
from .report import DEFAULT_PROG, OnDisk, Stats, dry_run, kernel_line, precision_lines, summary
from .stages import make_upscaler

if TYPE_CHECKING:
    from ..inference import Upscaler
    from . import cluster


def split_videos(todo: list[Job]) -> list[Job]:
    """Take the videos out of ``todo`` (in place) and return them: they run after the images, one
    at a time, each streamed through :mod:`sr.video`."""
    from ..video import check_installed, is_video

    videos = [j for j in todo if is_video(j.src)]
    if videos:
        check_installed()
        todo[:] = [j for j in todo if not is_video(j.src)]
    return videos


def find_inputs(opts: BatchOptions, outdir: Path) -> list[Job]:
    """The batch's jobs; BatchError naming each input when none of them names anything to read."""
    unmatched: list[str] = []
    jobs = collect_inputs(opts.inputs, opts.recursive, outdir, unmatched)
    if all(j.problem == MISSING for j in jobs):  # nothing to read: say so before any output folder is created
        named = "; ".join(unmatched[:3]) + ("; ..." if len(unmatched) > 3 else "")
        raise BatchError("no input images found{named}", named=f" ({named})" if named else "")
    return jobs


def checked_upscaler(opts: BatchOptions) -> Upscaler:
    """The batch's engine, once the model answers to its name and has the asked scale. With Ray this
    one only checks them on the driver (weights load lazily, the device is the actors'): the CPU is
    always there."""
    problem = missing_model(opts.request.model, opts.weights_dir)
    if problem is None and opts.request.pre is not None:
        problem = missing_model(opts.request.pre, opts.weights_dir)
        problem = problem and f"{opts.option_name('pre')}: {problem}"
    if problem is not None:
        raise BatchError("{detail}", detail=problem)
    from ..inference import UpscaleError

    on_ray = opts.ray is not None
    try:
        up = make_upscaler(opts, device="cpu" if on_ray else None, threads=1 if on_ray else None)
        if opts.request.scale is not None:
            up.check_scale(opts.request.scale)
    except UpscaleError as e:
        raise BatchError("{detail}", detail=str(e)) from None
    return up


def execute(up: Upscaler, todo: list[Job], videos: list[Job], stats: Stats, opts: BatchOptions,
            executor: cluster.Executor | None) -> None:
    """The images on Ray (``executor``) or local threads, then the videos, on Ray or locally."""
    if executor is not None:
        executor.run(stats)
    elif todo:
        from .local import run_local

        run_local(up, todo, stats, opts)
    if videos and opts.ray is not None:
        from .video_cluster import run_videos_ray

        run_videos_ray(up, videos, stats, opts)
    elif videos:
        from .videos import run_videos

        run_videos(up, videos, stats, opts)


def run_batch(opts: BatchOptions, prog: str = DEFAULT_PROG) -> int:
    """Upscale ``opts.inputs`` into ``opts.output``: 0 when every image was written (or skipped),
    1 when any failed; BatchError for what stops the batch before it starts. A bad file is reported
    with its path (after ``prog``) and the batch goes on; outputs are written atomically, and none on
    an input. Inputs and the model's name are checked before the engine (and torch) is loaded: a typo
    is reported at once."""
    opts = opts.checked()
    on_ray = opts.ray is not None
    if on_ray:
        from . import cluster

        cluster.check_installed()
    outdir = Path(opts.output).expanduser()
    if outdir.exists() and not outdir.is_dir():
        raise BatchError("output {outdir} exists and is not a folder", outdir=outdir)
    jobs = find_inputs(opts, outdir)
    up = checked_upscaler(opts)
    suffix = opts.suffix if opts.suffix is not None else default_suffix(opts, min(up.scales))
    plan_outputs(jobs, outdir, suffix, opts)
    todo = [j for j in jobs if j.problem is None and not j.skip]
    videos = split_videos(todo)  # the rest of todo: images
    skipped = sum(j.skip for j in jobs)
    if opts.dry_run:
        return dry_run(jobs, todo + videos, skipped, up)
    # Ray first (an unreachable cluster is an error before anything is created); its start-up lines
    # then come before the progress bar. The session stops a Ray it started, whatever happens.
    with cluster.connect(opts.ray) if on_ray else contextlib.nullcontext():
        # checks the cluster (videos alone: sr.batch.video_cluster runs them)
        executor = cluster.Executor(opts, up, todo, outdir) if on_ray and todo else None
        prepare_output_folder(outdir)
        if executor is not None:
            executor.check_workers()  # the workers see the inputs and can write the outputs
        stats = Stats(len(todo) + len(videos), verbose=opts.verbose, prog=prog)
        if opts.verbose and not on_ray:  # Ray's actors decide on their own CPUs (each file's line says)
            for line in [*precision_lines(up, opts.request), kernel_line(up)]:
                if line:
                    stats.bar.write(line, file=sys.stdout)
        for job in jobs:
            if job.problem is not None:
                stats.warn(f"{job.src}: {job.problem}")
        stats.failed = sum(j.problem is not None for j in jobs)
        on_disk = OnDisk(todo)
        start = time.perf_counter()
        try:
            execute(up, todo, videos, stats, opts, executor)
        except KeyboardInterrupt:
            stats.bar.close()
            stats.done = max(stats.done, on_disk.written())  # Ray's in-flight outputs are files too
            summary(stats, skipped, time.perf_counter() - start, interrupted=True)
            raise
    stats.bar.close()
    summary(stats, skipped, time.perf_counter() - start)
    return 1 if stats.failed else 0
