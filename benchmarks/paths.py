"""``sr bench paths``: the inference paths of one model side by side, on the same images, in one run.

Paths: ``tiered`` (torch, budget-following tiers: the CPU default), ``static`` (torch, fixed-shape
gathers with the budget as a mask), ``compile`` (the static path under ``torch.compile(dynamic=True)``,
inductor) and ``onnx`` (the ONNX export on onnxruntime's CPU provider). Each image goes whole through
the network (no tiling, no decoding), the paths interleaved in rounds so that they share the
machine's load; a path's figure is its best round. The first call of each path is timed apart as
``setup`` (first-shape work: compilation, session start). Outputs are compared with the tiered
path's (PSNR over [0, 1]): static and compile must match it to float tolerance, onnx to >= 50 dB.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from sr.errors import CLIError
from sr.evaluation import list_images
from sr.inference.devices import configure_threads, resolve_device
from sr.inference.onnx_export import OnnxNet, OnnxUnavailable, export_onnx
from sr.io import read_image
from sr.metrics import float_psnr
from sr.models import set_attention_path
from sr.weights import WeightsError, load_model

from .attention import Clock, add_timing_arguments
from .tooling import comma_choices

REPO = Path(__file__).resolve().parents[1]
PATHS = ("tiered", "static", "compile", "onnx")
DEFAULT_PATHS = ("tiered", "static", "onnx")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="asa-base-x2", help="shipped model name or .safetensors file")
    p.add_argument("--images", default=str(REPO / "data"),
                   help="folder of input images, upscaled as they are (default: the repo's data/ samples)")
    p.add_argument("--max-images", type=int, default=None, help="use only the first N images")
    p.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                   help=f"comma-separated subset of {', '.join(PATHS)} (default: {','.join(DEFAULT_PATHS)})")
    p.add_argument("--onnx-file", default=None, metavar="FILE",
                   help="ONNX export to time (default: export --model to a temporary file)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per path (default 3)")
    add_timing_arguments(p)


def run(args: argparse.Namespace) -> int:
    paths = comma_choices(args.paths, PATHS, "path(s)")
    if args.rounds < 1:
        raise CLIError("--rounds must be >= 1")
    device = resolve_device(args.device)
    if "onnx" in paths and device.type != "cpu":
        raise CLIError("the onnx path runs on onnxruntime's CPU provider: use --device cpu")
    threads = configure_threads(args.threads or None)
    clock = Clock(args.clock, device)
    try:
        model = load_model(args.model)
    except WeightsError as e:
        raise CLIError(str(e)) from None
    weights = model.path
    net = model.net.to(device).eval().requires_grad_(False).to(memory_format=torch.channels_last)
    try:
        files = list_images(Path(args.images))[: args.max_images]
    except FileNotFoundError:
        raise CLIError(f"image folder not found: {args.images}") from None
    if not files:
        raise CLIError(f"no images in {args.images}")
    inputs = []
    for f in files:
        pixels = read_image(f).pixels  # (H, W, 1|3) float32 in [0, 1]
        if pixels.shape[2] == 1:
            pixels = np.repeat(pixels, 3, axis=2)
        inputs.append(np.ascontiguousarray(pixels.transpose(2, 0, 1))[None])  # (1, 3, H, W)
    out_mp = sum(x.shape[2] * x.shape[3] for x in inputs) * net.scale**2 / 1e6

    runners = {}
    tmp_dir = None
    for path in paths:
        if path in ("tiered", "static"):
            runners[path] = _torch_runner(net, path, device)
        elif path == "compile":
            compiled = torch.compile(net, dynamic=True)
            runners[path] = _torch_runner(compiled, "static", device, set_on=net)
        else:
            try:
                file = args.onnx_file
                if file is None:
                    tmp_dir = tempfile.TemporaryDirectory()
                    print("exporting the model to ONNX ...", file=sys.stderr, flush=True)
                    file = export_onnx(weights, Path(tmp_dir.name) / "model.onnx")
                onnx_net = OnnxNet(file, threads=threads)
            except (OnnxUnavailable, ValueError) as e:
                raise CLIError(str(e)) from None
            runners[path] = onnx_net
    setup: dict[str, float] = {}
    outputs: dict[str, list] = {}
    for path, fn in runners.items():  # first call: compile / session warm-up / first shapes
        setup[path] = clock(lambda fn=fn: fn(inputs[0]))
        outputs[path] = [fn(x) for x in inputs]
    times: dict[str, list[float]] = {p: [] for p in runners}
    for _ in range(args.rounds):
        for path, fn in runners.items():
            times[path].append(clock(lambda fn=fn: [fn(x) for x in inputs]))
    if tmp_dir is not None:
        tmp_dir.cleanup()

    ref = paths[0]
    print(f"{args.model}: {len(inputs)} images from {args.images}, {out_mp:.2f} output MP per round; "
          f"device {device}, {threads} thread(s), {args.clock} clock, best of {args.rounds} rounds")
    header = f"{'path':<8} {'MP/s':>8} {'vs ' + ref:>10} {'setup s':>8} {'PSNR vs ' + ref:>16}"
    print(header)
    print("-" * len(header))
    base = out_mp / min(times[ref])
    for path in runners:
        mps = out_mp / min(times[path])
        psnr = min(float_psnr(a, b) for a, b in zip(outputs[path], outputs[ref], strict=True))
        shown = "(reference)" if path == ref else ("identical" if psnr == float("inf") else f"{psnr:.1f} dB")
        print(f"{path:<8} {mps:>8.3f} {mps / base:>9.2f}x {setup[path]:>8.2f} {shown:>16}")
    return 0


def _torch_runner(net, path: str, device, set_on=None):
    def fn(x):
        set_attention_path(set_on if set_on is not None else net, path)  # the paths share one network
        with torch.inference_mode():
            t = torch.from_numpy(x).to(device).contiguous(memory_format=torch.channels_last)
            return net(t).float().cpu().numpy()

    return fn
