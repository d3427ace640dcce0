"""``sr export CKPT -o weights/NAME.safetensors``: EMA weights of a checkpoint + metadata
(:mod:`sr.train.export`).

``sr export --onnx MODEL -o model.onnx``: a shipped model or .safetensors file as an ONNX graph
(dynamic height and width, the budget at its trained value; :mod:`sr.inference.onnx_export`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import CLIError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="best.pt or last.pt of a training run; with --onnx, a shipped model "
                                      "name (e.g. asa-base-x2) or a .safetensors file")
    p.add_argument("-o", "--output", required=True, help="output .safetensors path (.onnx with --onnx)")
    p.add_argument("--onnx", action="store_true",
                   help="export a trained model to ONNX (needs the extra: pip install -e '.[onnx]')")
    p.add_argument("--experimental", metavar="NOTE", default=None,
                   help="mark the weights as an experimental model, with a note on why (sr info shows it)")
    p.add_argument("--hardware", default=None,
                   help="hardware note for the metadata (default: what the checkpoint recorded training on)")


# run imports the export modules (torch) itself: `sr export` with bad arguments fails in 0.1 s.
def run(args: argparse.Namespace) -> int:
    if args.onnx:
        return _run_onnx(args)
    from ..train.export import ExportError, export_checkpoint

    try:
        done = export_checkpoint(args.checkpoint, args.output, args.hardware, args.experimental)
    except ExportError as e:
        raise CLIError(str(e)) from None
    if done.validation:
        scores = ", ".join(f"{k} {v['psnr']:.3f} dB" for k, v in done.validation.items())
        print(f"wrote {done.path} (step {done.step}: {scores})")
    else:
        print(f"wrote {done.path} (step {done.step}, not validated at that step: "
              "no validation in the metadata)")
    return 0


def _run_onnx(args: argparse.Namespace) -> int:
    from ..inference.onnx_export import OnnxUnavailable, export_onnx
    from ..weights import WeightsError

    if not args.output.endswith(".onnx"):
        raise CLIError("with --onnx, the output must end in .onnx")
    out = Path(args.output)
    if not out.parent.is_dir():
        raise CLIError(f"output folder not found: {out.parent}")
    try:
        written = export_onnx(args.checkpoint, out)
    except (OnnxUnavailable, WeightsError) as e:
        raise CLIError(str(e)) from None
    print(f"wrote {written} ({written.stat().st_size / 2**20:.1f} MiB; input float32 NCHW RGB in [0, 1], "
          "any height and width)")
    return 0
