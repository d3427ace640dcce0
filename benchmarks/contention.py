"""``sr bench contention``: throughput of engines sharing the CPU, by workers and threads per worker.

A service with ``workers`` > 1 runs that many forwards at once in one process (threads sharing one
model, :mod:`service.jobs`); Ray actors or several ``sr`` processes on one node do the same across
processes. Each of them asks for some intra-op threads; when their sum exceeds the free cores, the
thread teams of OpenMP wait at barriers for members the scheduler has parked, and the throughput
can collapse instead of being shared.

For each configuration ``WxT`` (``--configs``: W workers of T threads each), each backend and each
load, W Python threads run forwards of one LR tile (a centre crop of a photograph) back to back for
``--seconds``; the figure is forwards per second summed over the workers, with the median latency of
one forward. Loads: ``none`` (the machine as it is) and ``busy`` (one busy-loop process per usable
CPU, started for the arm and stopped after it: other engines or jobs at full tilt). Every
configuration, backend and load is run once per round, the order reversed every other round, so
drifting load from other processes hits all arms alike; the figures are medians over rounds.

Backends: ``torch`` (the engine's own network: its dtype, channels-last layout and attention path)
and ``openvino`` (the project's ONNX export, :func:`sr.inference.onnx_export.export_onnx`, compiled
by OpenVINO for the CPU at the tile's static shape, in the same precision; W workers are W streams
of one compiled model with W x T threads). OpenVINO is optional (``pip install openvino``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from sr.errors import CLIError

from .cost import centre_tile, load_picture
from .tooling import comma_choices, write_json

BACKENDS = ("torch", "openvino")
LOADS = ("none", "busy")
# A busy loop that ends on its own after the given seconds, even if the benchmark is killed.
BUSY_LOOP = ("import sys, time\nend = time.monotonic() + float(sys.argv[1])\n"
             "while time.monotonic() < end:\n    pass\n")


@dataclass
class ContentionRow:
    backend: str
    load: str
    workers: int
    threads: int
    tiles_per_s: float  # forwards per second, all workers together: median over rounds
    latency_ms: float  # median latency of one forward (all rounds)
    cpu_ms: float  # this process's CPU time per forward (all threads; spinning counts): median over rounds
    forwards: int  # forwards timed, all rounds


def parse_configs(text: str) -> list[tuple[int, int]]:
    """``"1x1,2x1"`` -> [(1, 1), (2, 1)]: (workers, threads per worker), each >= 1."""
    out = []
    for part in (p.strip().lower() for p in text.split(",")):
        if not part:
            continue
        w, sep, t = part.partition("x")
        if not (sep and w.isdigit() and t.isdigit() and int(w) >= 1 and int(t) >= 1):
            raise CLIError(f"--configs: {part!r} is not WORKERSxTHREADS, e.g. 2x1")
        out.append((int(w), int(t)))
    if not out:
        raise CLIError(f"--configs names nothing: {text!r}")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="asa-base-x2", help="shipped model with a scale (default asa-base-x2)")
    p.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"),
                   help="network precision, as the engine picks it (default auto)")
    p.add_argument("--tile", type=int, default=256, help="square LR tile side (default 256)")
    p.add_argument("--configs", default="1x1,1x2,2x1,2x2",
                   help="comma-separated WORKERSxTHREADS (default 1x1,1x2,2x1,2x2)")
    p.add_argument("--backends", default="torch", help=f"comma-separated subset of {', '.join(BACKENDS)}")
    p.add_argument("--loads", default=",".join(LOADS), help="comma-separated subset of none,busy")
    p.add_argument("--busy", type=int, default=0,
                   help="busy-loop processes under load 'busy' (default 0: one per usable CPU)")
    p.add_argument("--seconds", type=float, default=4.0, help="length of one arm (default 4)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds; medians (default 2)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


@contextmanager
def busy_load(processes: int, seconds: float) -> Iterator[list[subprocess.Popen]]:
    """``processes`` busy-loop processes for at most ``seconds`` (stopped early on leaving)."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(seconds)]) for _ in range(processes)]
    try:
        time.sleep(0.3)  # let them start spinning before the arm's clock starts
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def run_arm(make_call: Callable[[int], Callable[[], object]], workers: int, seconds: float
            ) -> tuple[int, float, float, list[float]]:
    """``workers`` threads calling their ``make_call(i)()`` back to back for ``seconds``: (forwards,
    elapsed seconds until the last worker finished, this process's CPU seconds meanwhile, latencies)."""
    calls = [make_call(i) for i in range(workers)]
    latencies: list[list[float]] = [[] for _ in range(workers)]
    barrier = threading.Barrier(workers + 1)
    deadline = [0.0]

    def work(i: int) -> None:
        with torch.inference_mode():  # thread-local: each worker enters it, as service jobs do
            barrier.wait()
            while True:
                t0 = time.perf_counter()
                calls[i]()
                t1 = time.perf_counter()
                latencies[i].append(t1 - t0)
                if t1 >= deadline[0]:
                    return

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    start, cpu_start = time.perf_counter(), time.process_time()
    deadline[0] = start + seconds
    barrier.wait()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    flat = [x for lat in latencies for x in lat]
    return len(flat), elapsed, cpu, flat


class TorchBackend:
    """The engine's network; T threads per worker is torch's intra-op thread count, which every new
    worker thread takes from the process-wide setting when it first runs an op."""

    def __init__(self, model: str, precision: str, tile: np.ndarray) -> None:
        from sr.inference.engine import UpscaleError, Upscaler

        try:
            up = Upscaler(model, device="cpu", precision=precision, threads=1)
            if len(up.scales) != 1:
                raise CLIError(f"--model {model!r} is a family ({up.scales}); name one scale")
            self.net = up.network(up.scales[0])
        except UpscaleError as e:
            raise CLIError(str(e)) from None
        dtype = next(self.net.parameters()).dtype
        self.x = torch.from_numpy(tile).to(dtype).contiguous(memory_format=torch.channels_last)

    def prepare(self, workers: int, threads: int) -> Callable[[int], Callable[[], object]]:
        torch.set_num_threads(threads)
        with torch.inference_mode():
            self.net(self.x)  # warm-up at this thread count
        return lambda _i: (lambda: self.net(self.x))

    def output(self) -> np.ndarray:
        with torch.inference_mode():
            return self.net(self.x).float().numpy()


class OpenVinoBackend:
    """The ONNX export compiled by OpenVINO at the tile's shape: one compiled model per (W, T), W
    streams of W x T threads, one infer request per worker."""

    def __init__(self, onnx_file: Path, bf16: bool, tile: np.ndarray) -> None:
        try:
            import openvino as ov
        except ImportError:
            raise CLIError("the openvino backend needs OpenVINO: pip install openvino") from None
        self.ov, self.core = ov, ov.Core()
        self.model = self.core.read_model(str(onnx_file))
        self.model.reshape({0: list(tile.shape)})
        self.hint = "bf16" if bf16 else "f32"
        self.x = np.ascontiguousarray(tile, dtype=np.float32)
        self._compiled: dict[tuple[int, int], object] = {}

    def compiled(self, workers: int, threads: int):
        key = (workers, threads)
        if key not in self._compiled:
            props = self.ov.properties
            self._compiled[key] = self.core.compile_model(self.model, "CPU", {
                props.hint.inference_precision: self.hint,
                props.num_streams: workers,
                props.inference_num_threads: workers * threads,
                props.hint.enable_hyper_threading: False,
            })
        return self._compiled[key]

    def prepare(self, workers: int, threads: int) -> Callable[[int], Callable[[], object]]:
        compiled = self.compiled(workers, threads)
        requests = [compiled.create_infer_request() for _ in range(workers)]
        requests[0].infer({0: self.x})  # warm-up

        def make(i: int) -> Callable[[], object]:
            return lambda: requests[i].infer({0: self.x})

        return make

    def output(self) -> np.ndarray:
        request = self.compiled(1, 1).create_infer_request()
        return np.array(request.infer({0: self.x})[0])


def table(rows: list[ContentionRow]) -> str:
    base = {(r.backend, r.load): r.tiles_per_s for r in rows if (r.workers, r.threads) == (1, 1)}
    lines = ["| backend | load | workers x threads | tiles/s | vs 1x1 | latency ms | CPU ms per tile |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = base.get((r.backend, r.load))
        rel = f"{r.tiles_per_s / ref:.2f}x" if ref else "-"
        lines.append(f"| {r.backend} | {r.load} | {r.workers}x{r.threads} | {r.tiles_per_s:.2f} | {rel} "
                     f"| {r.latency_ms:.0f} | {r.cpu_ms:.0f} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from sr.inference.devices import usable_cpus

    configs = parse_configs(args.configs)
    backends = comma_choices(args.backends, BACKENDS, "backend(s)")
    loads = comma_choices(args.loads, LOADS, "load(s)")
    if args.rounds < 1 or args.seconds <= 0 or args.tile < 8 or args.busy < 0:
        raise CLIError("--rounds must be >= 1, --seconds > 0, --tile >= 8 and --busy >= 0")
    if args.json and not Path(args.json).parent.is_dir():
        raise CLIError(f"--json {args.json}: folder {Path(args.json).parent} does not exist")
    busy = args.busy or usable_cpus()
    tile = centre_tile(load_picture(None), args.tile).numpy()
    runners: dict[str, object] = {}
    torch_backend = TorchBackend(args.model, args.precision, tile)
    if "torch" in backends:
        runners["torch"] = torch_backend
    tmp = None
    if "openvino" in backends:
        from sr.inference.onnx_export import OnnxUnavailable, export_onnx

        tmp = tempfile.TemporaryDirectory()
        try:
            print("exporting the model to ONNX ...", file=sys.stderr, flush=True)
            onnx_file = export_onnx(args.model, Path(tmp.name) / "model.onnx")
        except OnnxUnavailable as e:
            raise CLIError(str(e)) from None
        bf16 = next(torch_backend.net.parameters()).dtype == torch.bfloat16
        runners["openvino"] = OpenVinoBackend(onnx_file, bf16, tile)
    precision = str(next(torch_backend.net.parameters()).dtype).removeprefix("torch.")
    agreement = None
    if "openvino" in runners:  # same tile, same precision: how far OpenVINO's output is from torch's
        from sr.metrics import float_psnr

        agreement = float_psnr(runners["openvino"].output(), torch_backend.output())  # type: ignore[attr-defined]
        print(f"openvino vs torch output on this tile: {agreement:.1f} dB", flush=True)
    print(f"{args.model}, {precision}, one {args.tile}^2 tile per forward; {usable_cpus()} usable CPUs; "
          f"busy load = {busy} busy-loop processes; {args.seconds:g} s per arm, median of {args.rounds} "
          f"interleaved rounds", flush=True)
    arms = [(b, load, w, t) for load in loads for b in runners for (w, t) in configs]
    rates: dict[tuple, list[float]] = {a: [] for a in arms}
    lats: dict[tuple, list[float]] = {a: [] for a in arms}
    cpus: dict[tuple, list[float]] = {a: [] for a in arms}
    try:
        for r in range(args.rounds):
            for arm in arms if r % 2 == 0 else list(reversed(arms)):
                backend, load, w, t = arm
                make = runners[backend].prepare(w, t)  # type: ignore[attr-defined]
                if load == "busy":
                    with busy_load(busy, args.seconds + 30):
                        n, elapsed, cpu, lat = run_arm(make, w, args.seconds)
                else:
                    n, elapsed, cpu, lat = run_arm(make, w, args.seconds)
                rates[arm].append(n / elapsed)
                cpus[arm].append(cpu / n)
                lats[arm].extend(lat)
                print(f"  round {r + 1}: {backend} {load} {w}x{t}: {n / elapsed:.2f} tiles/s, "
                      f"{1e3 * cpu / n:.0f} CPU ms per tile", flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    rows = [ContentionRow(backend=a[0], load=a[1], workers=a[2], threads=a[3],
                          tiles_per_s=statistics.median(rates[a]),
                          latency_ms=1e3 * statistics.median(lats[a]),
                          cpu_ms=1e3 * statistics.median(cpus[a]), forwards=len(lats[a]))
            for a in arms]
    print(table(rows))
    if args.json:
        write_json(args.json, {"model": args.model, "precision": precision, "tile": args.tile,
                               "usable_cpus": usable_cpus(), "busy_processes": busy, "seconds": args.seconds,
                               "rounds": args.rounds, "openvino_psnr_db": agreement,
                               "rows": [asdict(r) for r in rows]})
    return 0
