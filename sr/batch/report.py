"""What the user sees of a batch: the progress bar, per-file errors, the summary, the dry-run list."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from .. import AUTO_MODEL
from ..families import AUTO
from ..video import is_video
from .jobs import Job
from .stages import NO_BUDGET_MAPS, StageTimes, Written

if TYPE_CHECKING:
    from ..inference import Upscaler
    from ..request import UpscaleRequest
    from ..video.run import VideoResult

# What the batch's lines to stderr start with when the caller names nothing (sr upscale names itself).
DEFAULT_PROG = "sr.batch"


class Stats:
    """Counters shared by the executor's threads, and the progress bar they update. ``prog`` starts
    each line about a file that went wrong (``PROG: photo.png: ...``; the command passes its name)."""

    def __init__(self, total: int, verbose: bool = False, prog: str = DEFAULT_PROG) -> None:
        from tqdm import tqdm

        self.prog = prog
        self.lock = threading.Lock()
        self.done = self.failed = 0
        self.out_pixels = 0
        self.warned = False
        self.verbose = verbose
        self.chosen: Counter[str] = Counter()  # model="auto": files per family chosen
        self.times = StageTimes()  # summed over the files that reported theirs (-v's total line)
        self.timed = 0
        self.bar = tqdm(total=total, unit="img", disable=None, file=sys.stderr, dynamic_ncols=True)

    def warn(self, message: str) -> None:
        """One line to stderr, above the bar, in the program's name."""
        self.bar.write(f"{self.prog}: {message}", file=sys.stderr)

    def fail(self, path: Path, reason: str) -> None:
        with self.lock:
            self.failed += 1
            self.warn(f"{path}: {reason}")
            self.bar.update(1)

    def ok(self, pixels: int) -> None:
        with self.lock:
            self.done += 1
            self.out_pixels += pixels
            self.bar.update(1)

    def record(self, job: Job, written: Written) -> None:
        """Count one written (or failed) job; the no-budget-map warning is printed once."""
        if written.no_budget_map and not self.warned:
            self.warned = True
            self.warn(NO_BUDGET_MAPS)
        if written.problem is not None:
            self.fail(job.src, written.problem)
            return
        with self.lock:
            if written.chosen:
                self.chosen[written.chosen] += 1
            if written.times is not None:
                self.times.add(written.times)
                self.timed += 1
            if self.verbose:
                # auto's choice and why, then what ran in which number type (per pass, as this
                # file's size decided it)
                ran = written.ran or written.model
                line = f"{job.src} -> {job.out} ({f'{written.choice}: ' if written.choice else ''}{ran})"
                if written.times is not None:
                    line += f": {written.times.describe()}"
                self.bar.write(line, file=sys.stdout)
        self.ok(written.pixels)

    def video_done(self, job: Job, result: VideoResult, where: str = "") -> None:
        """Count one written video and print its line (``where``: e.g. ' on 2 Ray actor(s)')."""
        with self.lock:
            if result.chosen:
                self.chosen[result.chosen] += 1
            self.bar.write(f"{job.src} -> {job.out}: {result.describe(where)}")
        self.ok(result.upscaled_pixels)  # the batch's output MP/s: what this run computed


class OnDisk:
    """The outputs' state before a run, to count after an interruption what is on disk: an executor
    can be stopped while outputs it wrote are not yet reported (Ray's are still in flight)."""

    def __init__(self, todo: list[Job]) -> None:
        self.todo = todo
        self.before = [self._stamp(j.out) for j in todo]

    @staticmethod
    def _stamp(path: Path | None) -> tuple[int, int] | None:
        try:
            st = path.stat() if path is not None else None
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ino) if st is not None else None

    def written(self) -> int:
        """Outputs of this run's jobs made (or replaced) since the snapshot."""
        now = (self._stamp(j.out) for j in self.todo)
        return sum(stamp not in (None, was) for stamp, was in zip(now, self.before, strict=True))


def run_scales(up: Upscaler, request: UpscaleRequest | None = None) -> list[int]:
    """The model scales ``request``'s passes run (--scale 4: [4]; --outscale 8: [2, 4]), from its
    size options alone; every scale of the engine where each file's size decides (--width/--height)."""
    from ..inference import UpscaleError

    if request is None or request.width is not None or request.height is not None:
        return list(up.scales)
    try:  # with --scale or --outscale the passes do not depend on the input's size
        return sorted(set(up.plan_size(256, 256, request.scale, request.outscale)[1]))
    except UpscaleError:
        return list(up.scales)


def precision_lines(up: Upscaler, request: UpscaleRequest | None = None) -> list[str]:
    """-v's lines on what each network the request runs is, runs in, and why: one per scale it runs,
    and with model="auto" per side, e.g. 'precision: photo-natural-x4: bf16: AVX512_BF16 (AMD Zen 4),
    measured 1.7-2.0x fp32 at 96-800 px'. Each file's own line says what it ran in."""
    from ..inference.auto import AutoEngine
    from ..inference.precision import bf16_from_pixels

    if isinstance(up, AutoEngine):  # each side decides its own precision, from its own files
        sides = [(f"{family} side, {what} inputs", up.sides[family])
                 for family, what in ((AUTO.lossless, "lossless"), (AUTO.lossy, "lossy"))]
    else:
        sides = [("", up)]
    lines = []
    for scale in run_scales(up, request):
        for label, engine in sides:
            dtype, why = engine.precision_for(scale)  # a large input's
            name = engine.model_name(scale) if hasattr(engine, "model_name") else f"x{scale}"
            line = f"precision: {name}{f' ({label})' if label else ''}: {why}"
            if engine.dtype_for(scale, 1) != dtype:
                start = bf16_from_pixels() or 0
                line += f"; inputs under {start / 1e6:.2f} MP run fp32 (bf16 measured slower there)"
            lines.append(line)
    return lines


def kernel_line(up: Upscaler) -> str | None:
    """-v's line on what runs the routed attention's core, where the engine's networks have routed
    attention on the CPU's tiered path: 'attention kernel: fused C++ (AVX-512, built <date>)' or
    'attention kernel: fallback: tiered SDPA (<reason>)' (building the kernel if it is not built yet)."""
    if up.device.type != "cpu" or up.attention_path != "tiered" or up.k_max is None:
        return None
    from ..models.attention.native import kernel_status

    return f"attention kernel: {kernel_status()}"


def summary(stats: Stats, skipped: int, seconds: float, interrupted: bool = False) -> None:
    rate = stats.out_pixels / 1e6 / seconds if seconds > 0 else 0.0
    head = "interrupted: " if interrupted else ""
    print(f"{head}{stats.done} done, {skipped} skipped, {stats.failed} failed in {seconds:.1f} s "
          f"({rate:.2f} output MP/s)")
    if stats.verbose and stats.timed:
        # Summed per file: with several files the reader and writer threads overlap the model, so
        # the sum can exceed the wall time above; for one file it is that file's wall time.
        print(f"stages over {stats.timed} file{'s' if stats.timed != 1 else ''}: {stats.times.describe()} "
              f"(sum {stats.times.total:.2f} s; reading and writing overlap the model across files)")
    if stats.chosen:
        counts = ", ".join(f"{family} for {n} file{'s' if n != 1 else ''}"
                           for family, n in sorted(stats.chosen.items()))
        print(f"{AUTO_MODEL}: {counts}" + ("" if stats.verbose else " (-v lists each file)"))


def dry_run(jobs: list[Job], todo: list[Job], skipped: int, up: Upscaler | None = None) -> int:
    for job in jobs:
        if job.problem is not None:
            print(f"{job.src}: error: {job.problem}")
        elif job.skip:
            print(f"{job.src} -> {job.out} (exists, skipped)")
        else:
            extra = f" + {job.budget}" if job.budget is not None else ""
            choice = None  # auto: read from the file's header (a video's codec is known once probed)
            if up is not None and not is_video(job.src):
                choice = up.choose(job.src)
            extra += f" ({choice.describe()})" if choice is not None else ""
            print(f"{job.src} -> {job.out}{extra}")
    problems = sum(j.problem is not None for j in jobs)
    print(f"dry run: {len(todo)} to write, {skipped} skipped, {problems} with errors; nothing written")
    return 1 if problems else 0
