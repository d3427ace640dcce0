"""Make docs/figure-peers.png: one degraded x4 input through photo and the public real-input peers.

    python docs/make_peer_figure.py            # the defaults below (needs ../shared: valid/ and peers/)
    python docs/make_peer_figure.py --image polyu_half_Canon5D2_chair_mean --level heavy --box 300 200 120

Panels: the uploaded file (the degraded valid set's JPEG, ``sr degrade --level LEVEL``, built here if
missing) enlarged x4 nearest | photo | light SAFMN++ | Real-ESRGAN general-x4v3 (GAN-trained) | the
original. Each is the same crop of the x4 output, enlarged x2 (nearest) so the pixels show; labels
give the whole image's Y-PSNR against the clean original (the protocol of ``sr eval``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # research/ is not installed: it runs from the checkout

from research.real_input import DEFAULT_PEERS, DEFAULT_VALID, SCALE, contenders  # noqa: E402
from sr.evaluation import model_upscaler, plan_sets, score_pairs  # noqa: E402
from sr.evaluation.degraded import build_degraded_set, set_folder_name  # noqa: E402

LABEL_H, GAP, ZOOM = 22, 4, 2
SHOWN = ("photo", "SAFMN++ light", "R-ESRGAN general")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default="bsds500test_109055", help="valid/ file stem")
    ap.add_argument("--level", default="web")
    ap.add_argument("--box", type=int, nargs=3, default=(180, 100, 120), metavar=("X", "Y", "SIDE"),
                    help="crop of the x4 output (output pixels)")
    ap.add_argument("--sets", default=str(ROOT / "runs" / "degraded"), help="where degraded sets are kept")
    ap.add_argument("-o", "--out", default=str(ROOT / "docs" / "figure-peers.png"))
    args = ap.parse_args()

    lr_dir = Path(args.sets) / set_folder_name(DEFAULT_VALID, args.level, SCALE)
    build_degraded_set(DEFAULT_VALID, lr_dir, SCALE, args.level)
    plan = plan_sets([str(DEFAULT_VALID)], [str(lr_dir)], SCALE)[0]
    plan.pairs = [p for p in plan.pairs if p[0].stem == args.image]
    if not plan.pairs:
        raise SystemExit(f"no valid/ image named {args.image}")
    models = {c.name: c for c in contenders(DEFAULT_PEERS, ["photo-x4"], 0.5)}

    lr = np.asarray(Image.open(plan.pairs[0][1]).convert("RGB"))
    panels = [np.repeat(np.repeat(lr, SCALE, axis=0), SCALE, axis=1)]
    labels = [f"input ({args.level} JPEG)"]
    for name in SHOWN:
        _, hr, psnr, _, sr_img = next(score_pairs(plan, model_upscaler(models[name].net), SCALE))
        panels.append(sr_img)
        labels.append(f"{name}{' (GAN)' if models[name].gan else ''} {psnr:.2f} dB")
    hr_rgb = hr if hr.ndim == 3 else np.repeat(hr[:, :, None], 3, axis=2)
    panels.append(hr_rgb[: panels[1].shape[0], : panels[1].shape[1]])
    labels.append("original")

    x, y, side = args.box
    crops = [Image.fromarray(p[y : y + side, x : x + side]).resize((side * ZOOM, side * ZOOM), Image.NEAREST)
             for p in panels]
    w = side * ZOOM
    canvas = Image.new("RGB", (len(crops) * w + (len(crops) - 1) * GAP, w + LABEL_H), "white")
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    for i, (crop, label) in enumerate(zip(crops, labels, strict=True)):
        canvas.paste(crop, (i * (w + GAP), LABEL_H))
        draw.text((i * (w + GAP) + 4, 5), label, fill="black", font=font)
    canvas.save(args.out, optimize=True)
    print(f"wrote {args.out} ({canvas.width}x{canvas.height}, {Path(args.out).stat().st_size // 1024} KB); "
          f"input {plan.pairs[0][1]}, x{SCALE}, level {args.level}")


if __name__ == "__main__":
    main()
