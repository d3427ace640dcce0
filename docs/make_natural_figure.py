"""Make docs/figure-natural.png: texture, a face and text at x4: original | photo | photo-natural | R-ESRGAN

    python docs/make_natural_figure.py      # needs ../shared (valid/, peers/) and the shipped weights
    python docs/make_natural_figure.py --zoom 2 --before OLD.safetensors --smooth bsds500test_14085 \
        -o docs/figure-natural-zoom.png     # 2x zoom, a smooth row, an earlier photo-natural beside

Rows: a valid/ texture (its ``web`` level: the uploaded JPEG, ``sr degrade``, built here if missing),
the astronaut's face and a sign's text from ``skimage.data`` (LR = MATLAB-bicubic x1/4 saved as a
JPEG at quality 75, as a web upload would be). Every panel is the same crop of the x4 output at 1:1
(no zoom: what a viewer sees at 100 %); labels give the crop's model. ``--zoom Z`` shows a crop of
1/Z the side with every pixel a Z x Z block (a viewer at Z x 100 %: where a dot lattice shows);
``--smooth STEM`` adds a row from that valid/ file's smooth area; ``--before FILE`` adds a column
for another photo-natural file (e.g. a candidate beside the shipped one; columns then carry the
files' names).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from skimage import data

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # research/ is not installed: it runs from the checkout

from research.real_input import DEFAULT_PEERS, DEFAULT_VALID, GENERAL_FILE  # noqa: E402
from research.srvgg import load_srvgg  # noqa: E402
from sr.evaluation import model_upscaler  # noqa: E402
from sr.evaluation.degraded import build_degraded_set, set_folder_name  # noqa: E402
from sr.io import read_array  # noqa: E402
from sr.resize import imresize, modcrop  # noqa: E402
from sr.weights import load_weights  # noqa: E402

SCALE, LABEL_H, GAP, SIDE = 4, 18, 4, 160


def _web_jpeg(hr: np.ndarray) -> np.ndarray:
    """x1/4 MATLAB bicubic, saved and read back as a quality-75 JPEG."""
    buf = io.BytesIO()
    Image.fromarray(imresize(hr, 1 / SCALE)).save(buf, format="JPEG", quality=75)
    return np.asarray(Image.open(buf).convert("RGB"))


def _rgb(img: np.ndarray) -> np.ndarray:
    return img if img.ndim == 3 else np.repeat(img[:, :, None], 3, axis=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texture", default="bsds500test_109055", help="valid/ file stem for the texture row")
    ap.add_argument("--sets", default=str(ROOT / "runs" / "degraded"), help="where degraded sets are kept")
    ap.add_argument("--natural", default=str(ROOT / "weights" / "photo-natural-x4.safetensors"),
                    help="the photo-natural x4 weights shown")
    ap.add_argument("--before", help="another photo-natural x4 file, a column before the shipped one")
    ap.add_argument("--smooth", help="valid/ file stem for a smooth-area row (at its --smooth-at)")
    ap.add_argument("--smooth-at", default="0,0", help="the smooth crop's top-left x,y in output pixels")
    ap.add_argument("--zoom", type=int, default=1, help="show crops at this zoom (nearest neighbour)")
    ap.add_argument("-o", "--out", default=str(ROOT / "docs" / "figure-natural.png"))
    args = ap.parse_args()
    side = SIDE // args.zoom

    lr_dir = Path(args.sets) / set_folder_name(DEFAULT_VALID, "web", SCALE)
    build_degraded_set(DEFAULT_VALID, lr_dir, SCALE, "web")
    texture_hr = modcrop(_rgb(read_array(next(DEFAULT_VALID.glob(f"{args.texture}.*")))), SCALE)
    texture_lr = _rgb(read_array(next(lr_dir.glob(f"{args.texture}_x{SCALE}.*"))))
    face = modcrop(data.astronaut(), SCALE)
    text = modcrop(_rgb(data.text()), SCALE)
    rows = [  # (name, HR, LR, crop's top-left in output pixels)
        ("texture (valid, web JPEG)", texture_hr, texture_lr, (180, 60)),
        ("face (astronaut, q75)", face, _web_jpeg(face), (180, 60)),
        ("text (sign, q75)", text, _web_jpeg(text), (20, 20)),
    ]
    if args.smooth:
        smooth_hr = modcrop(_rgb(read_array(next(DEFAULT_VALID.glob(f"{args.smooth}.*")))), SCALE)
        smooth_lr = _rgb(read_array(next(lr_dir.glob(f"{args.smooth}_x{SCALE}.*"))))
        at = tuple(int(v) for v in args.smooth_at.split(","))
        rows.insert(0, ("smooth (valid, web JPEG)", smooth_hr, smooth_lr, at))
    nets = {"photo": load_weights(ROOT / "weights" / "photo-x4.safetensors")[0]}
    if args.before:
        nets[Path(args.before).stem] = load_weights(args.before)[0]
    nets["photo-natural" if not args.before else Path(args.natural).stem] = load_weights(args.natural)[0]
    nets["R-ESRGAN general (GAN)"] = load_srvgg(DEFAULT_PEERS / GENERAL_FILE)
    columns = ["original", *nets]
    width = len(columns) * SIDE + (len(columns) - 1) * GAP
    canvas = Image.new("RGB", (width, len(rows) * (SIDE + LABEL_H + GAP) + LABEL_H), "white")
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    for c, name in enumerate(columns):
        draw.text((c * (SIDE + GAP) + 4, 3), name, fill="black", font=font)
    for r, (name, hr, lr, (x, y)) in enumerate(rows):
        top = LABEL_H + r * (SIDE + LABEL_H + GAP)
        label = name + (f", {args.zoom}x zoom" if args.zoom > 1 else "")
        draw.text((4, top + 2), label, fill="black", font=font)
        panels = [hr]
        for net in nets.values():
            out = model_upscaler(net.eval(), "cpu")(lr)
            panels.append(np.clip(np.rint(out), 0, 255).astype(np.uint8))
        for c, panel in enumerate(panels):
            crop = Image.fromarray(panel[y : y + side, x : x + side])
            if args.zoom > 1:
                crop = crop.resize((side * args.zoom, side * args.zoom), Image.NEAREST)
            canvas.paste(crop, (c * (SIDE + GAP), top + LABEL_H))
    canvas.save(args.out, optimize=True)
    print(f"wrote {args.out} ({canvas.width}x{canvas.height}, {Path(args.out).stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
