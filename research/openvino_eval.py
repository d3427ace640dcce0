"""OpenVINO as a CPU backend for the shipped models: speed, output agreement and shapes, beside torch.

For each model (``--models``) the project's ONNX export (:func:`sr.inference.onnx_export.export_onnx`,
the static attention path, budget baked in) is compiled by OpenVINO for the CPU at one tile's shape,
in f32 and in bf16, one thread and one stream. On one ``--tile`` crop of a photograph, in rounds
that interleave the arms, it times (this process's CPU time per forward, median over ``--rounds``):

- ``torch engine``: the engine's own network as ``sr upscale`` runs it (its precision, tiered path);
- ``torch static``: the same network on the static path (the graph the export holds);
- ``torch fp32``: the fp32 network, tiered: the reference output;
- ``openvino f32`` and ``openvino bf16``: the export at the tile's static shape.

Each arm's output is compared with the reference (PSNR over [0, 1], no rounding). Then the export
compiled with its dynamic height and width: the seconds of its first call at the tile's shape and at
an edge tile's (``--tile`` - 24 a side, what a tiled image's last row and column get), and its
steady time, against the static compile: a tiled image needs either this or one compile per shape.
Needs ``pip install -e ".[onnx,openvino]"``.

    PYTHONPATH=. OMP_NUM_THREADS=1 python -m research.openvino_eval --json ov.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from research._script import run_script
from sr.errors import CLIError

DEFAULT_MODELS = ("asa-base-x2", "asa-base-x4", "photo-x2")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help=f"comma-separated shipped models with a scale (default {','.join(DEFAULT_MODELS)})")
    p.add_argument("--tile", type=int, default=256, help="square LR tile side (default 256)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


def cpu_seconds(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def compile_openvino(onnx_file: Path, precision: str, shape: tuple[int, ...] | None):
    """The export compiled for the CPU, one thread and one stream; at ``shape`` or dynamic (None)."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(onnx_file))
    if shape is not None:
        model.reshape({0: list(shape)})
    props = ov.properties
    return core.compile_model(model, "CPU", {
        props.hint.inference_precision: precision, props.inference_num_threads: 1, props.num_streams: 1,
    })


def evaluate(name: str, tile: np.ndarray, rounds: int, tmp: Path) -> dict:
    import torch

    from sr.inference.engine import Upscaler
    from sr.inference.onnx_export import export_onnx
    from sr.metrics import float_psnr
    from sr.models import set_attention_path

    engine = Upscaler(name, device="cpu", threads=1)
    fp32 = Upscaler(name, device="cpu", precision="fp32", threads=1)
    if len(engine.scales) != 1:
        raise CLIError(f"--models {name!r} is a family ({engine.scales}); name one scale")
    net, ref_net = engine.network(engine.scales[0]), fp32.network(fp32.scales[0])
    dtype = next(net.parameters()).dtype

    def torch_arm(network, path: str, arm_dtype) -> Callable[[], np.ndarray]:
        x = torch.from_numpy(tile).to(arm_dtype).contiguous(memory_format=torch.channels_last)

        def call() -> np.ndarray:
            set_attention_path(network, path)  # the engine's and the static arm share one network
            with torch.inference_mode():
                return network(x).float().numpy()
        return call

    t0 = time.perf_counter()
    onnx_file = export_onnx(name, tmp / f"{name}.onnx")
    export_s = time.perf_counter() - t0
    size_mb = onnx_file.stat().st_size / 1e6
    x = np.ascontiguousarray(tile, dtype=np.float32)
    arms: dict[str, Callable[[], np.ndarray]] = {
        "torch engine": torch_arm(net, "tiered", dtype),
        "torch static": torch_arm(net, "static", dtype),
        "torch fp32": torch_arm(ref_net, "tiered", torch.float32),
    }
    compile_s = {}
    for precision in ("f32", "bf16"):
        t0 = time.perf_counter()
        request = compile_openvino(onnx_file, precision, x.shape).create_infer_request()
        compile_s[precision] = time.perf_counter() - t0
        arms[f"openvino {precision}"] = lambda r=request: np.array(r.infer({0: x})[0])
    outputs = {k: fn() for k, fn in arms.items()}  # also the warm-up
    times: dict[str, list[float]] = {k: [] for k in arms}
    for r in range(rounds):
        for k in arms if r % 2 == 0 else list(reversed(arms)):
            times[k].append(cpu_seconds(arms[k]))
    set_attention_path(net, "tiered")
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    psnr = {k: float_psnr(out, outputs["torch fp32"]) for k, out in outputs.items() if k != "torch fp32"}

    # dynamic shapes: one compile for every tile shape, against one compile per shape
    t0 = time.perf_counter()
    dyn_precision = "bf16" if dtype == torch.bfloat16 else "f32"
    dyn = compile_openvino(onnx_file, dyn_precision, None).create_infer_request()
    dyn_compile_s = time.perf_counter() - t0
    edge = np.ascontiguousarray(x[:, :, 24:, 24:])
    first = {"tile": cpu_seconds(lambda: dyn.infer({0: x})),
             "edge": cpu_seconds(lambda: dyn.infer({0: edge}))}
    steady = statistics.median(cpu_seconds(lambda: dyn.infer({0: x})) for _ in range(max(1, rounds // 2)))
    return {"model": name, "precision": str(dtype).removeprefix("torch."), "export_s": export_s,
            "onnx_mb": size_mb, "ov_compile_s": compile_s, "cpu_ms": ms, "psnr_vs_torch_fp32_db": psnr,
            "dynamic": {"compile_s": dyn_compile_s, "first_call_s": first, "steady_ms": 1e3 * steady}}


def report(rows: list[dict], tile: int) -> str:
    arms = list(rows[0]["cpu_ms"])
    lines = [f"CPU ms per forward of one {tile}^2 tile, 1 thread (PSNR vs torch fp32 tiered, dB):", "",
             "| model | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for r in rows:
        cells = [f"{r['cpu_ms'][a]:.0f}" + (f" ({r['psnr_vs_torch_fp32_db'][a]:.1f})"
                                             if a in r["psnr_vs_torch_fp32_db"] else "") for a in arms]
        lines.append(f"| {r['model']} ({r['precision']}) | " + " | ".join(cells) + " |")
    lines += ["", "| model | ONNX MB | export s | OV compile s f32/bf16 | dynamic: compile s | first call s "
              "tile/edge | steady ms |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r["dynamic"]
        lines.append(f"| {r['model']} | {r['onnx_mb']:.1f} | {r['export_s']:.0f} | "
                     f"{r['ov_compile_s']['f32']:.1f} / {r['ov_compile_s']['bf16']:.1f} | "
                     f"{d['compile_s']:.1f} | {d['first_call_s']['tile']:.2f} / "
                     f"{d['first_call_s']['edge']:.2f} | {d['steady_ms']:.0f} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from benchmarks.cost import centre_tile, load_picture
    from benchmarks.tooling import write_json
    from sr.inference.onnx_export import OnnxUnavailable

    try:
        import openvino  # noqa: F401
    except ImportError:
        raise CLIError('OpenVINO is not installed: pip install -e ".[openvino]"') from None
    if args.rounds < 1 or args.tile < 32:
        raise CLIError("--rounds must be >= 1 and --tile >= 32")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models:
        raise CLIError("--models names nothing")
    import torch

    torch.set_num_threads(1)
    tile = centre_tile(load_picture(None), args.tile).numpy()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            print(f"{name} ...", file=sys.stderr, flush=True)
            try:
                rows.append(evaluate(name, tile, args.rounds, Path(tmp)))
            except OnnxUnavailable as e:
                raise CLIError(str(e)) from None
    print(report(rows, args.tile))
    if args.json:
        write_json(args.json, {"tile": args.tile, "rounds": args.rounds, "rows": rows})
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, "research.openvino_eval")


if __name__ == "__main__":
    raise SystemExit(main())
