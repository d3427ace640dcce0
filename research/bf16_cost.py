"""``python -m research.bf16_cost``: what running a weights file, or a blend of two, in bf16 costs.

For each contender the valid Y-PSNR (the ``sr eval`` protocol: MATLAB-bicubic LR of each HR, whole
images, ``scale`` pixels of border cut) in fp32 and in bf16 on this CPU; the cost is fp32 minus bf16.
A contender is ``FILE``, ``A+B@T`` (every tensor ``(1 - T) * A + T * B``, as ``--look`` and
``--denoise`` blend; ``A+B@T1,T2,...`` measures several amounts) or ``A+B+C@D:L`` (``(1 - D) * A +
D * ((1 - L) * B + L * C)``: ``--denoise D --look L`` with A = asa-base, B = photo, C =
photo-natural). The record in :data:`sr.inference.precision.BF16_PSNR_COST_DB` and its blend
table come from this, on valid only (Set5 and Set14 are the test: reported, never chosen on)::

    python -m research.bf16_cost --hr ../shared/datasets/valid --scale 2 --threads 2 \\
        weights/photo-x2.safetensors+weights/photo-natural-x2.safetensors@0.25,0.5,0.75
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from sr.evaluation import model_upscaler
from sr.evaluation.protocol import evaluate_folder
from sr.weights import blend_state_dicts, load_weights


def contenders(spec: str) -> list[tuple[str, torch.nn.Module]]:
    """(label, fp32 network) for each contender of one spec (see the module docstring)."""
    if "+" not in spec:
        net, _ = load_weights(spec)
        return [(Path(spec).stem, net.eval())]
    files, _, amounts = spec.partition("@")
    if files.count("+") == 2:
        return [three_way(files.split("+"), text) for text in amounts.split(",")]
    a_path, b_path = files.split("+")
    net_a, _ = load_weights(a_path)
    net_b, _ = load_weights(b_path)
    base, other = net_a.state_dict(), net_b.state_dict()
    out = []
    for text in amounts.split(","):
        t = float(text)
        net, _ = load_weights(a_path)
        net.load_state_dict(blend_state_dicts(base, other, t))
        out.append((f"{Path(a_path).stem}+{Path(b_path).stem}@{t:g}", net.eval()))
    return out


def three_way(paths: list[str], amounts: str) -> tuple[str, torch.nn.Module]:
    """``--denoise D --look L``'s network from its three files and 'D:L'."""
    d, look = (float(v) for v in amounts.split(":"))
    a, b, c = (load_weights(p)[0].state_dict() for p in paths)
    net, _ = load_weights(paths[0])
    net.load_state_dict(blend_state_dicts(a, blend_state_dicts(b, c, look), d))
    stems = "+".join(Path(p).stem for p in paths)
    return f"{stems}@{d:g}:{look:g}", net.eval()


def valid_psnr(net: torch.nn.Module, hr_dir: str, scale: int, dtype: torch.dtype) -> float:
    """Mean Y-PSNR over the folder, the network run whole in ``dtype``."""
    upscale = model_upscaler(net.to(dtype), "cpu", False, dtype)
    scores = [s.psnr for s in evaluate_folder(hr_dir, scale, upscale)]
    net.float()
    return sum(scores) / len(scores)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m research.bf16_cost", description=__doc__.split("\n")[0])
    p.add_argument("specs", nargs="+", metavar="FILE|A+B@T[,T...]")
    p.add_argument("--hr", required=True, help="HR folder (valid)")
    p.add_argument("--scale", type=int, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="append the results to this JSON file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = json.loads(Path(args.json).read_text()) if args.json and Path(args.json).exists() else {}
    for spec in args.specs:
        for label, net in contenders(spec):
            with torch.inference_mode():
                fp32 = valid_psnr(net, args.hr, args.scale, torch.float32)
                bf16 = valid_psnr(net, args.hr, args.scale, torch.bfloat16)
            results[label] = {"fp32": fp32, "bf16": bf16, "cost": fp32 - bf16}
            print(f"{label:<52} fp32 {fp32:.4f}  bf16 {bf16:.4f}  cost {fp32 - bf16:+.4f} dB", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
