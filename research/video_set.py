"""The video path's gain over bicubic on every valid/ image: the distribution, not one clip.

For each of the held-out valid/ images (all of them, sorted; ``--first N`` for a quick subset): a short
pan (``--frames`` frames, 3 HR pixels a frame) over a ``--size`` window centred on the image (turned
landscape when portrait, so all 33 fit), downscaled x2 with MATLAB bicubic and encoded H.264 at
``--crf`` like the reference clip (research/video_clips.py, no audio). Each method (bicubic, a model,
``NAME@D`` for ``--denoise D``) is scored as its frames leave the network (``raw``) and after the
output encode at each ``--out-crf`` (research/video_scoring.py), so bicubic and the models go through
the same path. Prints one line per image and the distribution (mean, median, min, max) of each
method's gain over bicubic at the same stage.

    PYTHONPATH=. OMP_NUM_THREADS=1 python -m research.video_set --threads 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from research._script import run_script
from research.video_clips import VALID, pan_frames, write_clip
from research.video_scoring import Methods, encoded_y, mean_psnr, y_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--valid", type=Path, default=VALID)
    p.add_argument("--first", type=int, default=0, help="only the first N images (sorted names)")
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--step", type=int, default=3)
    p.add_argument("--size", default="448x256", help="HR window WxH")
    p.add_argument("--crf", type=int, default=23, help="the test clips' CRF")
    p.add_argument("--out-crf", type=int, nargs="*", default=[18], help="output CRFs to score")
    p.add_argument("--methods", nargs="+", default=["asa-base", "photo"])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--precision", default="auto")
    p.add_argument("--decoder-option", action="append", default=[], metavar="KEY=VALUE",
                   help="FFmpeg decoder option for the models' input (e.g. skip_loop_filter=all)")


def summary(gains: list[float]) -> str:
    g = np.array(gains)
    return f"mean {g.mean():+.2f}, median {np.median(g):+.2f}, min {g.min():+.2f}, max {g.max():+.2f}"


def run(args: argparse.Namespace) -> int:
    from sr.resize import imresize

    w, h = (int(v) for v in args.size.lower().split("x"))
    images = sorted(p for p in args.valid.iterdir() if p.suffix.lower() in {".png", ".jpg", ".jpeg"})
    images = images[: args.first] if args.first else images
    stages = ["raw", *(f"CRF {c}" for c in args.out_crf)]
    methods = Methods(args.threads, args.precision, dict(o.split("=", 1) for o in args.decoder_option))
    names = ["bicubic", *args.methods]
    table: dict[tuple[str, str], list[float]] = {(m, s): [] for m in names for s in stages}
    with tempfile.TemporaryDirectory(prefix="sr-video-set-") as tmp:
        work = Path(tmp)
        for photo in images:
            hr = pan_frames(photo, args.frames, args.step, w, h)
            clip = work / "clip.mp4"
            write_clip(clip, np.stack([imresize(f, 0.5) for f in hr]), args.crf, audio=False)
            hr_y = [y_of(f) for f in hr]
            row = []
            for m in names:
                outs = methods.frames(m, clip)
                table[m, "raw"].append(mean_psnr([y_of(f) for f in outs], hr_y))
                for c in args.out_crf:
                    ys = encoded_y(clip, outs, c, work / "out.mp4")
                    table[m, f"CRF {c}"].append(mean_psnr(ys, hr_y))
                row.append(f"{m} " + " ".join(f"{table[m, s][-1]:.2f}" for s in stages))
            print(f"{photo.name[:40]:40s} " + " | ".join(row), flush=True)
    print(f"{len(images)} images, {args.frames} frames of {w}x{h} HR, clip CRF {args.crf}; "
          f"gain over bicubic at the same stage ({', '.join(stages)}):")
    for s in stages:
        bic = np.array(table["bicubic", s])
        print(f"  {s}: bicubic mean {bic.mean():.2f} dB, median {np.median(bic):.2f}")
        for m in args.methods:
            print(f"    {m:14s} {summary(list(np.array(table[m, s]) - bic))}")
            if s != "raw":
                vs_raw = np.array(table[m, s]) - table["bicubic", "raw"]
                print(f"    {m:14s} vs bicubic raw: {summary(list(vs_raw))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, "research.video_set")


if __name__ == "__main__":
    sys.exit(main())
