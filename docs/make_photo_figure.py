"""Make docs/figure-photo.png: a degraded input upscaled by bicubic | asa-base | photo | the original.

    python docs/make_photo_figure.py                       # the defaults below (needs ../shared)
    python docs/make_photo_figure.py --image bsds500test_163004 --level medium --scale 2 --box 120 80 160

The LR is the file of the degraded valid set (``sr degrade --hr ../shared/datasets/valid --level
LEVEL``, built here if missing), i.e. the JPEG a user would upload; each panel is the same crop of
the x``scale`` output, enlarged x2 (nearest) so the pixels show; the label gives each image's Y-PSNR
against the clean original.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from sr.evaluation import plan_sets, score_pairs
from sr.evaluation.degraded import build_degraded_set, set_folder_name
from sr.inference import Upscaler
from sr.io import read_image

ROOT = Path(__file__).resolve().parent.parent
VALID = ROOT.parent / "shared" / "datasets" / "valid"
LABEL_H, GAP, ZOOM = 22, 4, 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default="polyu_half_Canon5D2_chair_mean", help="valid/ file stem")
    ap.add_argument("--level", default="medium")
    ap.add_argument("--scale", type=int, default=2)
    ap.add_argument("--box", type=int, nargs=3, default=(300, 200, 160), metavar=("X", "Y", "SIDE"),
                    help="crop of the output (output pixels)")
    ap.add_argument("--sets", default=str(ROOT / "runs" / "degraded"), help="where degraded sets are kept")
    ap.add_argument("-o", "--out", default=str(ROOT / "docs" / "figure-photo.png"))
    args = ap.parse_args()

    lr_dir = Path(args.sets) / set_folder_name(VALID, args.level, args.scale)
    build_degraded_set(VALID, lr_dir, args.scale, args.level)
    plan = plan_sets([str(VALID)], [str(lr_dir)], args.scale)[0]
    plan.pairs = [p for p in plan.pairs if p[0].stem == args.image]
    if not plan.pairs:
        raise SystemExit(f"no valid/ image named {args.image}")

    panels, labels = [], []
    for name in ("bicubic", "asa-base", "photo"):
        up = None
        if name != "bicubic":
            engine = Upscaler(name, device="cpu", threads=1)

            def up(lr: np.ndarray, engine: Upscaler = engine) -> np.ndarray:
                img = read_image_array(lr)
                return engine.upscale(img, scale=args.scale).image.pixels[:, :, :3] * 255

        _, hr, psnr, _, sr_img = next(score_pairs(plan, up, args.scale))
        panels.append(sr_img)
        labels.append(f"{name} {psnr:.2f} dB")
    hr_rgb = hr if hr.ndim == 3 else np.repeat(hr[:, :, None], 3, axis=2)
    panels.append(hr_rgb[: panels[0].shape[0], : panels[0].shape[1]])
    labels.append("original")

    x, y, side = args.box
    crops = [Image.fromarray(p[y : y + side, x : x + side]).resize((side * ZOOM, side * ZOOM), Image.NEAREST)
             for p in panels]
    w = side * ZOOM
    canvas = Image.new("RGB", (4 * w + 3 * GAP, w + LABEL_H), "white")
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    for i, (crop, label) in enumerate(zip(crops, labels, strict=True)):
        canvas.paste(crop, (i * (w + GAP), LABEL_H))
        draw.text((i * (w + GAP) + 4, 5), label, fill="black", font=font)
    canvas.save(args.out, optimize=True)
    print(f"wrote {args.out} ({canvas.width}x{canvas.height}, {Path(args.out).stat().st_size // 1024} KB); "
          f"input {lr_dir / plan.pairs[0][1].name}, x{args.scale}, level {args.level}")


def read_image_array(lr: np.ndarray):
    """The engine takes a DecodedImage: round-trip the uint8 LR through PNG bytes, as a file would."""
    import io

    buf = io.BytesIO()
    Image.fromarray(lr).save(buf, format="PNG")
    return read_image(buf.getvalue())


if __name__ == "__main__":
    main()
