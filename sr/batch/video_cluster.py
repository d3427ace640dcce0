"""``--ray`` for videos: each video's missing segments upscaled on a pool of Ray actors (one engine
each), then joined in order on the driver. A segment is the same file wherever it is encoded (same
frames, settings and engine options), so the output equals the local run's (tested byte for byte).
Like the image executor, the workers must see the input and the output folder at the same paths.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..video import VideoError
from ..video.run import finish, frame_bar, interrupted, parts_folder, plan_video, result_of

if TYPE_CHECKING:
    from ..inference import Upscaler
    from .jobs import Job
    from .options import BatchOptions
    from .report import Stats


class SegmentActor:
    """One engine on a Ray worker; encodes whole segments into the shared segment folder."""

    def __init__(self, opts: BatchOptions, threads: int) -> None:
        from .stages import make_upscaler

        self.opts = opts
        self.up = make_upscaler(opts, threads=threads)

    def encode(self, src: str, a: int, b: int, dest: str) -> tuple[int, str, str]:
        """Frames a..b-1 of ``src`` into ``dest``: (frames, model, auto's choice) or VideoError."""
        from ..video import segments as seg
        from ..video.probe import probe
        from ..video.run import frame_upscaler, settings_of

        info = probe(Path(src))
        upscale = frame_upscaler(self.up, info, self.opts)
        seg.encode_segment(info, a, b, upscale, settings_of(self.opts), Path(dest))
        r = upscale.last
        return b - a, r.model if r is not None else "", r.choice.describe() if r and r.choice else ""


def actors_for(opts: BatchOptions, segments: int) -> int:
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 1))
    wanted = opts.ray_actors or max(1, cpus // (opts.threads or 1))
    return max(1, min(wanted, segments))


def run_videos_ray(up: Upscaler, videos: list[Job], stats: Stats, opts: BatchOptions,
                   segment_frames: int = 0) -> None:
    """The videos of a ``--ray`` batch, one after another, each one's segments spread on the actors."""
    import ray

    from ..inference import UpscaleError

    threads = opts.threads or 1
    remote = ray.remote(num_cpus=threads, max_restarts=2, max_task_retries=2)(SegmentActor)
    pool: list = []
    for job in videos:
        start = time.perf_counter()
        plan = None
        try:
            plan = plan_video(up, job.src.absolute(), job.out.absolute(), opts, segment_frames)
            kept = plan.done_frames
            todo = plan.missing
            want = actors_for(opts, len(todo)) if todo else 0
            while len(pool) < want:
                pool.append(remote.remote(opts, threads))
            bar = frame_bar(plan)
            refs = {}
            for n, i in enumerate(todo):
                (a, b), path = plan.spans[i], plan.paths[i]
                refs[pool[n % len(pool)].encode.remote(str(plan.info.path), a, b, str(path))] = i
            choice = model = ""
            try:
                pending = list(refs)
                while pending:
                    ready, pending = ray.wait(pending, num_returns=1)
                    frames, model, choice = ray.get(ready[0])
                    bar.update(frames)
            except ray.exceptions.RayTaskError as e:
                cause = e.as_instanceof_cause()
                if isinstance(cause, VideoError | UpscaleError):
                    raise cause from None
                raise VideoError(f"a segment failed on Ray ({type(e.cause).__name__}: {e.cause})") from None
            except ray.exceptions.RayError as e:  # e.g. an actor dead past its restarts
                raise VideoError(f"a segment failed on Ray ({type(e).__name__})") from None
            finally:
                bar.close()
            finish(plan)
        except (VideoError, UpscaleError) as e:
            shutil.rmtree(parts_folder(job.out), ignore_errors=True)
            stats.fail(job.src, str(e))
            continue
        except KeyboardInterrupt:
            if plan is not None:  # what the committed segments keep for the next run
                stats.warn(str(interrupted(plan)))
            raise
        r = result_of(up, plan, opts, time.perf_counter() - start, model=model, kept=kept)
        r.choice = choice
        stats.video_done(job, r, f" on {len(pool)} Ray actor(s)")
