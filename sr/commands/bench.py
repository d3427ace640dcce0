"""``sr bench WHAT``: benchmarks of what users run (not tests). Each lives in ``sr.bench.<what>`` with
add_arguments/run. Research studies (training curves, ablations, budget studies, peers) are scripts
of the checkout's research/ folder, not installed with the package."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

BENCHMARKS = {
    "attention": "attention family: time and peak memory vs dense, by feature-map size",
    "train": "training-step time per preset and attention kind",
    "upscale": "upscaling throughput (output MP/s) of shipped models vs bicubic",
    "paths": "inference paths side by side: tiered vs static attention, torch.compile, onnxruntime",
    "serve": "bounded load test of the HTTP service on loopback",
    "cost": "attention share of a forward and achieved conv TFLOP/s, per model, precision and tile",
    "contention": "throughput by workers x threads with and without competing CPU load (torch, openvino)",
}


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str] = ()) -> None:
    sub = p.add_subparsers(dest="bench", metavar="WHAT", required=True)
    # Only the chosen benchmark's module is imported (they pull in heavy or optional packages).
    chosen = next((a for a in argv if a in BENCHMARKS), None)
    for name, help_text in BENCHMARKS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            importlib.import_module(f"sr.bench.{name}").add_arguments(sp)


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(f"sr.bench.{args.bench}").run(args) or 0)
