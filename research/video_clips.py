"""Test clips for the video measurements: HR frames of a pan, their x2 LR clip (H.264, AAC, title).

Two sources of HR frames, both from valid/ (held out, never trained on):

- :func:`mosaic_frames`, the reference clip: a pan across a mosaic of 8 valid images picked by a rule
  fixed before any model was scored: the sorted file names, every 4th from the first (so BSDS500,
  City100, PolyU and SUN-Hays all appear), each turned landscape and centre-cropped to 292x288,
  tiled 4 x 2 into a 1168x576 canvas. One averaged PolyU photo (bicubic alone reaches 39 dB there)
  said little about video in general; the mosaic mixes the set's content.
- :func:`pan_frames`: a pan across one photo (the whole-set measurement, research/video_set.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

VALID = Path(__file__).resolve().parents[2] / "shared/datasets/valid"
TILE_W, TILE_H, COLS, ROWS = 292, 288, 4, 2


def load_landscape(path: Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB, turned 90 degrees when portrait (so every image can hold a wide window)."""
    from PIL import Image

    img = np.asarray(Image.open(path).convert("RGB"))
    return np.ascontiguousarray(np.rot90(img)) if img.shape[0] > img.shape[1] else img


def centre_crop(img: np.ndarray, w: int, h: int, name: str = "") -> np.ndarray:
    ih, iw = img.shape[:2]
    if ih < h or iw < w:
        raise SystemExit(f"{name or 'image'} is {iw}x{ih}: too small for a {w}x{h} window")
    top, left = (ih - h) // 2, (iw - w) // 2
    return img[top:top + h, left:left + w]


def mosaic_sources(folder: Path = VALID) -> list[Path]:
    """The mosaic's 8 images: sorted names, every 4th from the first."""
    names = sorted(p for p in folder.iterdir() if p.suffix.lower() in {".png", ".jpg", ".jpeg"})
    return names[::4][: COLS * ROWS]


def mosaic(folder: Path = VALID) -> np.ndarray:
    tiles = [centre_crop(load_landscape(p), TILE_W, TILE_H, p.name) for p in mosaic_sources(folder)]
    rows = [np.concatenate(tiles[r * COLS:(r + 1) * COLS], axis=1) for r in range(ROWS)]
    return np.concatenate(rows, axis=0)


def pan(canvas: np.ndarray, w: int, h: int, frames: int, step: int, name: str = "") -> np.ndarray:
    """(N, h, w, 3) uint8: a left-to-right pan over ``canvas`` (vertically centred), ``step`` px a frame."""
    ch, cw = canvas.shape[:2]
    if ch < h or cw < w + step * (frames - 1):
        raise SystemExit(f"{name or 'canvas'} is {cw}x{ch}: too small for {frames} frames of {w}x{h} "
                         f"at step {step}")
    top = (ch - h) // 2
    return np.stack([canvas[top:top + h, i * step:i * step + w] for i in range(frames)])


def mosaic_frames(frames: int, step: int, w: int = 1024, h: int = 576) -> np.ndarray:
    return pan(mosaic(), w, h, frames, step, "the mosaic")


def pan_frames(photo: Path, frames: int, step: int, w: int, h: int) -> np.ndarray:
    """A pan across the window of ``photo`` (turned landscape) centred on it."""
    img = load_landscape(photo)
    span = w + step * (frames - 1)
    return pan(centre_crop(img, min(span, img.shape[1]), h, photo.name), w, h, frames, step, photo.name)


def write_clip(path: Path, lr: np.ndarray, crf: int, audio: bool = True) -> None:
    """``lr`` as H.264 yuv420p at ``crf``, 24 fps, with a title tag and (``audio``) a mono AAC tone
    as long as the video."""
    import av

    with av.open(str(path), "w") as out:
        out.metadata["title"] = "sr video test"
        v = out.add_stream("libx264", rate=24)
        v.width, v.height, v.pix_fmt = lr.shape[2], lr.shape[1], "yuv420p"
        v.options = {"crf": str(crf)}
        a = None
        if audio:
            a = out.add_stream("aac", rate=48000)
            a.layout = "mono"
        for i, frame in enumerate(lr):
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
            f.pts = i
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode(None):
            out.mux(p)
        if a is None:
            return
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
