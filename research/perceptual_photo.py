"""``python -m research.perceptual_photo``: fidelity and naturalness of photo models side by side.

Each contender upscales the LR files of every ``--lr`` folder (``sr degrade`` sets of ``--hr``,
matched by file name) whole, in fp32, on the CPU; each output is scored against its HR with PSNR-Y
(the ``sr eval`` protocol) and the perceptual metrics of :mod:`sr.evaluation.perceptual` (HaarPSI,
ColorVideoVDP JOD on the FHD display model at 1:1 and at 200% zoom, BRISQUE, the lattice
amplitude), all with the ``scale``-pixel border cropped.
"flat" measures whether smooth regions stay smooth: over the HR pixels whose 7 x 7 luminance
standard deviation is below 2 (of 255), the mean 7 x 7 standard deviation of the output divided by
HR's there (1 = as flat as HR, above 1 = texture or noise invented where there is none).

Contenders: ``NAME=FILE.safetensors`` (our weights), ``NAME=A.safetensors+B.safetensors@T`` (every
tensor (1 - T) * A + T * B, as ``--look`` blends), ``NAME=realesrgan`` (Real-ESRGAN general-x4v3
from ``../shared/peers``, x4 only). Needs the perceptual extra (``pip install '.[perceptual]'``).
Choose on valid; Set5/Set14 are test sets.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from sr.evaluation import load_hr, model_upscaler, plan_sets, score_lr
from sr.evaluation.perceptual import parse_metrics, score_perceptual
from sr.evaluation.scoring import perceptual_crop
from sr.models import SRNet
from sr.weights import blend_state_dicts, load_weights

REPO = Path(__file__).resolve().parents[1]
PEERS = REPO.parent / "shared" / "peers"
METRICS = ("haarpsi", "cvvdp", "cvvdp-zoom", "brisque", "lattice")
FLAT_STD = 2.0  # HR luminance std (of 255) below which a 7 x 7 window counts as flat


def _local_std(y: np.ndarray) -> np.ndarray:
    # (H, W) float -> 7 x 7 standard deviation, same size (reflect-padded)
    t = torch.from_numpy(y)[None, None]
    t = F.pad(t, (3, 3, 3, 3), mode="reflect")
    mean = F.avg_pool2d(t, 7, stride=1)
    var = (F.avg_pool2d(t * t, 7, stride=1) - mean * mean).clamp_min(0)
    return var.sqrt()[0, 0].numpy()


def _luma(img: np.ndarray) -> np.ndarray:
    img = img.astype(np.float64)
    return img if img.ndim == 2 else img @ np.array([0.299, 0.587, 0.114])


def flat_ratio(hr: np.ndarray, sr: np.ndarray) -> tuple[float, float] | None:
    """(output std, HR std) summed over HR's flat windows, or None when the image has none."""
    hr_std = _local_std(_luma(hr))
    mask = hr_std < FLAT_STD
    if mask.sum() < 100:
        return None
    return float(_local_std(_luma(sr))[mask].sum()), float(hr_std[mask].sum())


def load_contender(spec: str, scale: int):
    """(name, upscale function) from 'NAME=...' (see the module docstring)."""
    name, _, what = spec.partition("=")
    if not what:
        raise SystemExit(f"contender {spec!r}: write NAME=FILE, NAME=A+B@T or NAME=realesrgan")
    if what == "realesrgan":
        from research.srvgg import load_srvgg

        if scale != 4:
            raise SystemExit("Real-ESRGAN general-x4v3 is x4 only")
        net = load_srvgg(PEERS / "realesr-general-x4v3.pth")
    elif "+" in what:
        pair, _, amount = what.rpartition("@")
        a, _, b = pair.partition("+")
        net_a, _ = load_weights(a)
        net_b, _ = load_weights(b)
        net = SRNet(net_b.cfg)
        net.load_state_dict(blend_state_dicts(net_a.state_dict(), net_b.state_dict(), float(amount)))
    else:
        net, _ = load_weights(what)
    return name, model_upscaler(net.eval(), "cpu")


def evaluate(
    hr_dir: str, lr_dir: str, scale: int, upscale, metrics: tuple[str, ...], images: int = 0
) -> dict:
    """Means over the set: psnr (Y) and each metric; flat = summed output std / HR std on flat areas."""
    rows, flat_num, flat_den = [], 0.0, 0.0
    (plan,) = plan_sets([hr_dir], [lr_dir], scale)
    for hr_path, lr_path in plan.pairs[: images or None]:
        hr = load_hr(hr_path)
        p, _, sr = score_lr(hr, load_hr(lr_path), upscale, scale)
        hr_c, sr_c = perceptual_crop(hr, sr, scale)  # as sr eval --metrics crops
        row = {"psnr": p, **score_perceptual(metrics, hr_c, sr_c, scale)}
        rows.append(row)
        flat = flat_ratio(hr_c, sr_c)
        if flat is not None:
            flat_num, flat_den = flat_num + flat[0], flat_den + flat[1]
    # nanmean: lattice is NaN (not scored) on an image with too little smooth area, as in sr eval
    means = {k: float(np.nanmean([r[k] for r in rows])) for k in rows[0]}
    means["flat"] = flat_num / flat_den if flat_den else float("nan")
    means["images"] = len(rows)
    return means


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research.perceptual_photo",
                                description=__doc__.split("\n")[0])
    p.add_argument("--hr", required=True, help="HR folder (valid)")
    p.add_argument("--lr", nargs="+", required=True, help="LR folders made from --hr by sr degrade")
    p.add_argument("--scale", type=int, required=True)
    p.add_argument("--models", nargs="+", required=True, metavar="NAME=WHAT")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--images", type=int, default=0, help="only the first N images of each set (0 = all)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    metrics = parse_metrics(",".join(METRICS))
    results: dict = {}
    for spec in args.models:
        name, upscale = load_contender(spec, args.scale)
        for lr_dir in args.lr:
            r = evaluate(args.hr, lr_dir, args.scale, upscale, metrics, args.images)
            results.setdefault(name, {})[Path(lr_dir).name] = r
            print(f"{name:<24} {Path(lr_dir).name:<18} PSNR-Y {r['psnr']:.3f}  HaarPSI {r['haarpsi']:.4f}  "
                  f"JOD {r['cvvdp']:.3f}  JOD@200% {r['cvvdp-zoom']:.3f}  BRISQUE {r['brisque']:.2f}  "
                  f"flat {r['flat']:.3f}  lattice {r['lattice']:.3f}", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
