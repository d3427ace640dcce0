"""The batch's videos, one after the other on the local engine, each reported like an image: done
(with its frames/s and output MP/s) or failed with one line naming the file."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from ..video import VideoError
from ..video.run import VideoInterrupted, parts_folder, upscale_video

if TYPE_CHECKING:
    from ..inference import Upscaler
    from .jobs import Job
    from .options import BatchOptions
    from .report import Stats


def run_videos(up: Upscaler, videos: list[Job], stats: Stats, opts: BatchOptions) -> None:
    """Upscale each video job into its ``out``; a bad video is one line in ``stats`` and leaves no
    output (nor segments); Ctrl-C keeps the committed segments for the next run to resume from, and
    says how many frames that is."""
    from ..inference import UpscaleError

    for job in videos:
        try:
            if job.out.exists() and not (opts.overwrite or opts.skip_existing):
                raise VideoError(f"output {job.out} appeared meanwhile (use {opts.option_name('overwrite')})")
            r = upscale_video(up, job.src, job.out, opts)
        except VideoInterrupted as e:
            stats.warn(str(e))
            raise
        except (VideoError, UpscaleError) as e:
            shutil.rmtree(parts_folder(job.out), ignore_errors=True)
            stats.fail(job.src, str(e))
            continue
        except OSError as e:
            stats.fail(job.src, f"writing failed ({e.strerror or e})")
            continue
        stats.video_done(job, r)
