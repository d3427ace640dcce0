"""Video quality and speed of ``sr upscale clip.mp4``: a test clip made here, scored against its HR.

The clip: a pan across a held-out photo (valid/, never trained on): 1024x576 HR frames, each
downscaled x2 with MATLAB bicubic (what the models were trained on), encoded H.264 yuv420p at
``--crf`` and 24 fps, with an AAC track and a title tag. Each model runs through the real video path
(sr.video.run.upscale_video: decode, chroma interpolation, network, encode at the default CRF 18),
its output file is decoded and every frame scored against the HR (Y-PSNR), and flicker is the mean
absolute temporal difference of Y, output vs HR. Bicubic is MATLAB bicubic of the decoded LR frames
(not re-encoded: slightly in bicubic's favour). ``--speed`` times frames/s at 480p -> 960p in fp32 and
bf16, alternated in one process.

    PYTHONPATH=. OMP_NUM_THREADS=1 python -m research.video_quality --threads 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from research._script import run_script

DEFAULT_PHOTO = (Path(__file__).resolve().parents[2]
                 / "shared/datasets/valid/polyu_half_Canon5D2_chair_mean.png")
HR_W, HR_H = 1024, 576


def hr_frames(photo: Path, frames: int, step: int) -> np.ndarray:
    """(N, 576, 1024, 3) uint8: a left-to-right pan, ``step`` HR pixels a frame."""
    from PIL import Image

    img = np.asarray(Image.open(photo).convert("RGB"))
    h, w = img.shape[:2]
    if h < HR_H or w < HR_W + step * (frames - 1):
        raise SystemExit(f"{photo} is {w}x{h}: too small for {frames} frames of {HR_W}x{HR_H} at step {step}")
    top = (h - HR_H) // 2
    return np.stack([img[top:top + HR_H, i * step:i * step + HR_W] for i in range(frames)])


def write_clip(path: Path, lr: np.ndarray, crf: int) -> None:
    import av

    with av.open(str(path), "w") as out:
        out.metadata["title"] = "sr video test"
        v = out.add_stream("libx264", rate=24)
        v.width, v.height, v.pix_fmt = lr.shape[2], lr.shape[1], "yuv420p"
        v.options = {"crf": str(crf)}
        a = out.add_stream("aac", rate=48000)
        a.layout = "mono"
        for i, frame in enumerate(lr):
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
            f.pts = i
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode(None):
            out.mux(p)
        total, t = 48000 * len(lr) // 24, 0
        while t < total:
            k = min(1024, total - t)
            tone = (0.1 * np.sin(np.arange(t, t + k) / 30)).astype(np.float32)[None]
            af = av.AudioFrame.from_ndarray(tone, format="flt", layout="mono")
            af.sample_rate, af.pts = 48000, t
            for p in a.encode(af):
                out.mux(p)
            t += k
        for p in a.encode(None):
            out.mux(p)


def decoded_y(path: Path) -> list[np.ndarray]:
    """Y (BT.601 of RGB, as sr.metrics scores) of every frame, via our own YUV -> RGB."""
    from sr.metrics import rgb_to_y
    from sr.video.probe import probe
    from sr.video.segments import frames

    info = probe(path)
    return [rgb_to_y(rgb) for _, rgb in frames(info, 0, info.frames)]


def y_psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 10 * np.log10(1.0 / mse) if mse > 0 else float("inf")


def flicker(ys: list[np.ndarray]) -> float:
    return float(np.mean([np.abs(b - a).mean() for a, b in zip(ys, ys[1:], strict=False)]) * 255)


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
    p.add_argument("--photo", type=Path, default=DEFAULT_PHOTO)
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--step", type=int, default=3, help="pan, HR pixels per frame")
    p.add_argument("--crf", type=int, default=23)
    p.add_argument("--models", nargs="+", default=["asa-base", "photo"])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--speed", type=int, default=0, metavar="N", help="also time N frames per precision")
    p.add_argument("--keep", type=Path, default=None, help="keep the clip and outputs in this folder")


def run(args: argparse.Namespace) -> int:
    from sr.batch import BatchOptions
    from sr.batch.stages import make_upscaler
    from sr.metrics import rgb_to_y
    from sr.request import UpscaleRequest
    from sr.resize import imresize
    from sr.video.run import upscale_video

    work = args.keep or Path(tempfile.mkdtemp(prefix="sr-video-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    hr = hr_frames(args.photo, args.frames, args.step)
    lr = np.stack([imresize(f, 0.5) for f in hr])
    clip = work / "clip.mp4"
    write_clip(clip, lr, args.crf)
    hr_y = [rgb_to_y(f.astype(np.float32) / 255) for f in hr]
    print(f"clip {args.photo.name} CRF {args.crf}: {describe(clip)}")
    lr_y_rgb = []
    from sr.video.probe import probe
    from sr.video.segments import frames

    info = probe(clip)
    lr_y_rgb = [rgb for _, rgb in frames(info, 0, info.frames)]
    scores = {"bicubic": [rgb_to_y(np.clip(imresize(f, 2.0), 0, 1)) for f in lr_y_rgb]}
    for model in args.models:
        opts = BatchOptions(inputs=(), output=str(work), request=UpscaleRequest(model=model),
                            threads=args.threads).checked()
        out = work / f"clip_{model}.mp4"
        r = upscale_video(make_upscaler(opts), clip, out, opts)
        print(f"{model}: {describe(out)}; {r.frames / r.seconds:.2f} frames/s, "
              f"{r.out_pixels / 1e6 / r.seconds:.2f} output MP/s", flush=True)
        scores[model] = decoded_y(out)
    hr_flicker = flicker(hr_y)
    base = None
    for name, ys in scores.items():
        p = [y_psnr(y, h) for y, h in zip(ys, hr_y, strict=True)]
        mean = float(np.mean(p))
        base = mean if base is None else base
        print(f"{name:9s} Y-PSNR mean {mean:.2f} dB ({mean - base:+.2f} vs bicubic), min {min(p):.2f}, "
              f"flicker {flicker(ys):.3f} (HR {hr_flicker:.3f}, ratio {flicker(ys) / hr_flicker:.2f})")
    if args.speed:
        speed(args.models, args.threads, args.speed)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, "research.video_quality")


if __name__ == "__main__":
    sys.exit(main())
