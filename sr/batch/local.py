"""The local executor: reader thread -> queue -> the model (this thread) -> queue -> writer thread.

Reading the next image and writing the previous one run in their own threads around the model, so
the model does not wait on decoding or encoding.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from typing import TYPE_CHECKING

from .jobs import Job
from .options import BatchOptions
from .report import Stats
from .stages import StageTimes, read_input, upscale_input, write_output

if TYPE_CHECKING:
    from tqdm import tqdm

    from ..inference import Upscaler
    from ..inference.tiling import ProgressFn
    from ..io import DecodedImage

_DONE = object()  # end-of-stream marker between the threads
# Inputs of at least this many pixels get a second bar that advances per tile: at x2 on a CPU such
# an image takes tens of seconds, and a batch bar that stands still that long looks hung.
TILE_BAR_PIXELS = 4_000_000


def tile_bar(job: Job, image: DecodedImage) -> tqdm | None:
    """A per-tile bar under the batch bar for a large input (hidden when stderr is not a terminal)."""
    from tqdm import tqdm

    if image.width * image.height < TILE_BAR_PIXELS:
        return None
    return tqdm(total=1, unit="tile", desc=job.src.name, leave=False, position=1, disable=None,
                file=sys.stderr, dynamic_ncols=True)


def tile_progress(bar: tqdm) -> ProgressFn:
    """The engine's progress callback, drawn on ``bar`` (a chained model pass starts it again)."""

    def update(done: int, total: int) -> None:
        if total != bar.total or done < bar.n:
            bar.reset(total=total)
        bar.update(done - bar.n)

    return update


def _put(q: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Blocking put that gives up when ``stop`` is set (so a stopped consumer cannot hang us)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _reader(jobs: list[Job], q: queue.Queue, stop: threading.Event, max_pixels: int) -> None:
    for job in jobs:
        if stop.is_set():
            return
        start = time.perf_counter()
        decoded = read_input(job, max_pixels)
        if not _put(q, (job, decoded, StageTimes(decode=time.perf_counter() - start)), stop):
            return
    _put(q, _DONE, stop)


def _writer(q: queue.Queue, stats: Stats, opts: BatchOptions) -> None:
    while True:
        item = q.get()
        if item is _DONE:
            return
        job, output, times = item
        start = time.perf_counter()
        written = write_output(job, output, opts)
        times.encode = time.perf_counter() - start
        written.times = times
        stats.record(job, written)


def run_local(up: Upscaler, todo: list[Job], stats: Stats, opts: BatchOptions) -> None:
    """Run ``todo``; every job ends up in ``stats`` (done or failed). Ctrl-C: the writer finishes
    its current (atomic) file, results not yet written are dropped, KeyboardInterrupt goes on up."""
    stop = threading.Event()
    # One slot each way is enough to keep the model busy (the next image decodes and the previous one
    # encodes while it runs) and bounds memory to ~3 images in flight: outputs can be gigabytes.
    q_in: queue.Queue = queue.Queue(maxsize=1)
    q_out: queue.Queue = queue.Queue(maxsize=1)
    reader = threading.Thread(target=_reader, args=(todo, q_in, stop, opts.max_pixels), daemon=True)
    writer = threading.Thread(target=_writer, args=(q_out, stats, opts), daemon=True)
    reader.start()
    writer.start()
    try:
        while True:
            item = q_in.get()
            if item is _DONE:
                break
            job, (image, problem), times = item
            del item
            output = None
            if problem is None:
                bar = tile_bar(job, image)
                try:
                    progress = tile_progress(bar) if bar is not None else None
                    start = time.perf_counter()
                    output, problem = upscale_input(up, image, job, opts, progress=progress)
                    times.upscale = time.perf_counter() - start
                finally:
                    if bar is not None:
                        bar.close()
            del image
            if problem is not None:
                stats.fail(job.src, problem)
                continue
            q_out.put((job, output, times))
            del output
        q_out.put(_DONE)
        writer.join()
    except KeyboardInterrupt:
        stop.set()
        with q_out.mutex:
            q_out.queue.clear()
            q_out.not_full.notify_all()
        q_out.put(_DONE)
        writer.join()
        raise
