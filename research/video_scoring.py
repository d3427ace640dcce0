"""Scoring a test clip's upscales against its HR frames: Y-PSNR per frame and flicker.

A *method* is ``bicubic`` (MATLAB bicubic of the decoded LR frames) or a model name, optionally with
``@D`` for ``--denoise D`` (``photo@0.5``). A model runs through the video path's own frame function
(sr.video.run.frame_upscaler: our YUV -> RGB with interpolated chroma, the network, uint8); its frames
can then be scored as they leave the network (``raw``) or after the output encode (yuv420p + x264 at a
CRF, decoded again), and bicubic the same ways, so both sides of a gain went through the same path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def decoded_y(path: Path) -> list[np.ndarray]:
    """Y (BT.601 of RGB, as sr.metrics scores) of every frame, via our own YUV -> RGB."""
    from sr.metrics import rgb_to_y
    from sr.video.probe import probe
    from sr.video.segments import frames

    info = probe(path)
    return [rgb_to_y(rgb) for _, rgb in frames(info, 0, info.frames)]


def y_of(rgb8: np.ndarray) -> np.ndarray:
    from sr.metrics import rgb_to_y

    return rgb_to_y(rgb8.astype(np.float32) / 255)


def y_psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Y-PSNR of Y planes from :func:`sr.metrics.rgb_to_y` of [0, 1] RGB (so peak 1 is 255 levels)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 10 * np.log10(1.0 / mse) if mse > 0 else float("inf")


def mean_psnr(ys: list[np.ndarray], hr_y: list[np.ndarray]) -> float:
    return float(np.mean([y_psnr(y, h) for y, h in zip(ys, hr_y, strict=True)]))


def flicker(ys: list[np.ndarray]) -> float:
    """Mean absolute difference of Y between consecutive frames, in 8-bit levels."""
    return float(np.mean([np.abs(b - a).mean() for a, b in zip(ys, ys[1:], strict=False)]) * 255)


class Methods:
    """Frame functions per method, the engines loaded once and reused across clips."""

    def __init__(self, threads: int | None, precision: str = "auto",
                 decoder_options: dict[str, str] | None = None) -> None:
        """``decoder_options``: FFmpeg decoder options for the models' input frames (an experiment,
        e.g. ``skip_loop_filter=all``: H.264 without its deblocking); bicubic keeps the plain decode."""
        self.threads, self.precision, self.decoder_options = threads, precision, decoder_options
        self._ups: dict[str, tuple] = {}

    def _decoded(self, info) -> list[np.ndarray]:  # noqa: ANN001 - a VideoInfo
        """Every frame as float RGB, decoded with ``decoder_options`` (sr.video.colour's conversion)."""
        import av

        from sr.video.colour import to_rgb

        with av.open(str(info.path)) as c:
            stream = c.streams.video[0]
            stream.codec_context.options = dict(self.decoder_options or {})
            return [to_rgb(f, info.colour) for f in c.decode(stream)]

    def options(self, method: str):  # noqa: ANN201 - a BatchOptions
        from sr.batch import BatchOptions
        from sr.request import UpscaleRequest

        model, _, d = method.partition("@")
        request = UpscaleRequest(model=model, denoise=float(d) if d else None, precision=self.precision)
        return BatchOptions(inputs=(), output=".", request=request, threads=self.threads).checked()

    def frames(self, method: str, clip: Path) -> list[np.ndarray]:
        """The uint8 RGB frames ``method`` makes of every frame of ``clip``."""
        from sr.batch import make_upscaler
        from sr.resize import imresize
        from sr.video.probe import probe
        from sr.video.run import frame_upscaler
        from sr.video.segments import frames

        info = probe(clip)
        if method == "bicubic":
            def fn(rgb: np.ndarray) -> np.ndarray:
                return (np.clip(imresize(rgb, 2.0), 0, 1) * 255).round().astype(np.uint8)
        else:
            if method not in self._ups:
                opts = self.options(method)
                self._ups[method] = (make_upscaler(opts), opts)
            up, opts = self._ups[method]
            fn = frame_upscaler(up, info, opts)
            if self.decoder_options:
                return [fn(rgb) for rgb in self._decoded(info)]
        return [fn(rgb) for _, rgb in frames(info, 0, info.frames)]


def encoded_y(clip: Path, outs: list[np.ndarray], crf: int, dest: Path) -> list[np.ndarray]:
    """Y of ``outs`` after the video path's output encode (sr.video.segments.encode_segment, H.264
    yuv420p at ``crf`` with the clip's colour tags), decoded again."""
    from sr.video import segments as seg
    from sr.video.probe import probe
    from sr.video.settings import VideoSettings

    info = probe(clip)
    it = iter(outs)
    seg.encode_segment(info, 0, info.frames, lambda _rgb: next(it), VideoSettings(crf=crf), dest)
    return decoded_y(dest)
