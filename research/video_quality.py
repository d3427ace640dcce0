"""Video quality and speed of ``sr upscale clip.mp4``: the reference clip, made here, scored against its HR.

The clip (research/video_clips.py): a 48-frame pan, 3 HR pixels a frame, across a mosaic of 8 held-out
valid/ images chosen by a fixed rule (sorted names, every 4th); 1024x576 HR frames, each downscaled x2
with MATLAB bicubic (the models' training degradation), encoded H.264 yuv420p at ``--crf`` and 24 fps,
with an AAC track and a title tag. Each model runs through the whole video path
(sr.video.run.upscale_video: decode, chroma interpolation, network, encode at ``--out-crf``, join with
the audio), its output file is checked (frames, fps, size, audio, title), decoded and every frame
scored against the HR (Y-PSNR). Bicubic (MATLAB bicubic of the decoded LR frames) is scored both as
is (``raw``) and through the same output encode. Flicker is the mean absolute temporal difference of
Y, output vs HR. ``--photo`` pans across one image instead. ``--speed`` times frames/s at 480p -> 960p
in fp32 and bf16, alternated in one process.

    PYTHONPATH=. OMP_NUM_THREADS=1 python -m research.video_quality --threads 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from research._script import run_script
from research.video_clips import mosaic_frames, mosaic_sources, pan_frames, write_clip
from research.video_scoring import Methods, decoded_y, encoded_y, flicker, mean_psnr, y_of

HR_W, HR_H = 1024, 576


def describe(path: Path) -> str:
    import av

    with av.open(str(path)) as c:
        v = c.streams.video[0]
        n = sum(1 for _ in c.demux(v) if _.size)
        audio = c.streams.audio[0] if c.streams.audio else None
        adur = float(audio.duration * audio.time_base) if audio is not None and audio.duration else None
        return (f"{n} frames, {float(v.average_rate):g} fps, {v.width}x{v.height}, "
                f"audio {adur if adur is None else round(adur, 3)} s, title {c.metadata.get('title')!r}")


def speed(models: list[str], threads: int | None, n: int) -> None:
    from sr.inference import Upscaler
    from sr.io import DecodedImage

    rng = np.random.default_rng(0)
    frame = DecodedImage(rng.random((480, 854, 3), dtype=np.float32))
    for model in models:
        ups = {p: Upscaler(model, device="cpu", threads=threads, precision=p) for p in ("fp32", "bf16")}
        for up in ups.values():
            up.upscale(frame, scale=2, quantize=True)  # load and warm up
        took = {p: 0.0 for p in ups}
        for _ in range(n):
            for p, up in ups.items():  # alternated: the shared machine's load hits both alike
                t = time.perf_counter()
                up.upscale(frame, scale=2, quantize=True)
                took[p] += time.perf_counter() - t
        fps = {p: n / s for p, s in took.items()}
        print(f"speed {model} 854x480 -> 1708x960, {threads} thread(s): fp32 {fps['fp32']:.3f} frames/s, "
              f"bf16 {fps['bf16']:.3f} frames/s ({fps['bf16'] / fps['fp32']:.2f}x)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--photo", type=Path, default=None, help="pan across this image, not the mosaic")
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--step", type=int, default=3, help="pan, HR pixels per frame")
    p.add_argument("--crf", type=int, default=23, help="the test clip's CRF")
    p.add_argument("--out-crf", type=int, default=18, help="the upscaled output's CRF (sr's default 18)")
    p.add_argument("--models", nargs="+", default=["asa-base", "photo"],
                   help="model names; NAME@D for --denoise D")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--precision", default="auto")
    p.add_argument("--speed", type=int, default=0, metavar="N", help="also time N frames per precision")
    p.add_argument("--keep", type=Path, default=None, help="keep the clip and outputs in this folder")


def run(args: argparse.Namespace) -> int:
    from sr.batch import make_upscaler
    from sr.video.run import upscale_video

    work = args.keep or Path(tempfile.mkdtemp(prefix="sr-video-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.photo is None:
        hr = mosaic_frames(args.frames, args.step, HR_W, HR_H)
        source = "mosaic of " + ", ".join(p.name for p in mosaic_sources())
    else:
        hr = pan_frames(args.photo, args.frames, args.step, HR_W, HR_H)
        source = args.photo.name
    from sr.resize import imresize

    lr = np.stack([imresize(f, 0.5) for f in hr])
    clip = work / "clip.mp4"
    write_clip(clip, lr, args.crf)
    hr_y = [y_of(f) for f in hr]
    print(f"clip ({source}) CRF {args.crf}: {describe(clip)}")
    methods = Methods(args.threads, args.precision)
    bic = methods.frames("bicubic", clip)
    scores = {"bicubic raw": [y_of(f) for f in bic],
              f"bicubic CRF {args.out_crf}": encoded_y(clip, bic, args.out_crf, work / "clip_bicubic.mp4")}
    for model in args.models:
        opts = methods.options(model)
        opts = replace(opts, output=str(work), crf=args.out_crf).checked()
        out = work / f"clip_{model}.mp4"
        r = upscale_video(make_upscaler(opts), clip, out, opts)
        print(f"{model}: {describe(out)}; {r.frames / r.seconds:.2f} frames/s, "
              f"{r.out_pixels / 1e6 / r.seconds:.2f} output MP/s", flush=True)
        scores[f"{model} CRF {args.out_crf}"] = decoded_y(out)
    hr_flicker = flicker(hr_y)
    base = {k: mean_psnr(v, hr_y) for k, v in scores.items() if k.startswith("bicubic")}
    raw, same = base["bicubic raw"], base[f"bicubic CRF {args.out_crf}"]
    for name, ys in scores.items():
        p = mean_psnr(ys, hr_y)
        print(f"{name:22s} Y-PSNR mean {p:.2f} dB ({p - raw:+.2f} vs bicubic raw, {p - same:+.2f} vs bicubic "
              f"CRF {args.out_crf}), flicker {flicker(ys):.3f} (HR {hr_flicker:.3f}, "
              f"ratio {flicker(ys) / hr_flicker:.2f})")
    if args.speed:
        speed(args.models, args.threads, args.speed)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, "research.video_quality")


if __name__ == "__main__":
    sys.exit(main())
