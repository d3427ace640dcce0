"""Make docs/figure.png: bicubic input | sr output | attention budget map, side by side.

    python docs/make_figure.py                      # data/chelsea.png, x2, shipped asa-base
    python docs/make_figure.py data/rocket.png -o docs/figure.png --scale 2

The input is upscaled x2 with the shipped weights through ``sr.inference.Upscaler``; the budget map
is coloured with ``sr.inference.budget_heatmap`` on the model's k_max scale (black = 0 key regions,
pale yellow = k_max). Runs on the CPU in a few seconds; the PNG is saved with 256 colours to
stay small.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from sr.inference import Upscaler, budget_heatmap
from sr.io import read_image
from sr.resize import imresize

ROOT = Path(__file__).resolve().parent.parent
LABEL_H = 22
GAP = 4


def _to_rgb8(pixels: np.ndarray) -> np.ndarray:
    px = np.clip(pixels, 0, 1)
    if px.shape[2] == 1:
        px = np.repeat(px, 3, axis=2)
    return np.round(px * 255).astype(np.uint8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image", nargs="?", default=str(ROOT / "data" / "chelsea.png"))
    ap.add_argument("-o", "--out", default=str(ROOT / "docs" / "figure.png"))
    ap.add_argument("--scale", type=int, default=2)
    ap.add_argument("--model", default="asa-base")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    img = read_image(args.image)
    up = Upscaler(args.model, device="cpu", threads=args.threads)
    result = up.upscale(img, scale=args.scale, with_budget_map=True)
    out = _to_rgb8(result.image.pixels)
    h, w = out.shape[:2]
    bicubic = _to_rgb8(imresize(img.pixels, size=(h, w)))
    heat = budget_heatmap(result.budget_map, up.k_max)

    k = f"{up.k_max:g}" if up.k_max is not None else "max"
    labels = [f"input, bicubic x{args.scale}", f"{result.model}", f"budget map (black 0, yellow {k})"]
    panels = [bicubic, out, heat]
    canvas = Image.new("RGB", (3 * w + 2 * GAP, h + LABEL_H), "white")
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    for i, (panel, label) in enumerate(zip(panels, labels, strict=True)):
        x = i * (w + GAP)
        canvas.paste(Image.fromarray(panel), (x, LABEL_H))
        draw.text((x + 4, 5), label, fill="black", font=font)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    # 256 colours (median cut, dithered) keep the PNG under 300 KB for the README; full RGB is ~360 KB
    canvas.quantize(256, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)
    print(f"wrote {args.out} ({canvas.width}x{canvas.height}, {Path(args.out).stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
