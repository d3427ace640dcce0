"""``sr bench cost``: what the attention costs beside the convolutions, per model, precision and tile.

For each shipped model (``--models``), precision (``--precision``) and square LR tile (``--tiles``)
it times the engine's own network (:meth:`~sr.inference.engine.Upscaler.network`: its device, dtype,
channels-last layout and attention path) on one tile of a photograph, twice:

- **forward**: the whole network;
- **conv body**: the same network and weights with every attention block bypassed (the block
  returns its input), i.e. the convolutions, residual adds and pixel shuffle alone.

The attention's share is ``(forward - conv body) / forward``: what the attention blocks add to a
forward (their q/k/v and output convs, routing, gathers, attention and upsampling). A third arm,
**core free**, runs the whole network with the routed attention's core (the tiered path's gathers,
scores, softmax, weighted sums and scatter: :func:`~sr.models.attention.routing.region_attention`)
replaced by zeros of its output's shape: its share is what would remain if a kernel for the core
cost nothing, i.e. the floor that no faster core can go below. Where the fused kernel runs
(:mod:`sr.models.attention.native`), a fourth arm, **tiered**, runs the whole network on the tiered
SDPA path it replaces (the fallback), so one run gives the share before and after. The conv body's
convolutions are counted (multiply-accumulates per conv from its output size, kernel and groups) and
divided by the conv body's time: the achieved conv TFLOP/s, shown against the CPU's measured GEMM
peak in the same dtype and thread count (a large square matmul, ``--peak-size``), which is what
oneDNN's convolutions can at best approach.

Timing: medians over ``--rounds`` rounds, the two arms of every configuration interleaved in each
round, so load from other processes hits both alike; ``--clock cpu`` (the default) measures this
process's CPU time, which on a shared machine is far steadier than wall time (use it with
``--threads 1``). The input is a centre crop of skimage's astronaut (512 x 512; ``--image`` for
another picture): the adaptive attention spends by content, so random noise would misstate it.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sr.errors import CLIError
from sr.inference.engine import UpscaleError, Upscaler
from sr.inference.precision import DTYPES
from sr.models.attention import AttentionBranch, native, routing

from .attention import Clock, run_config
from .tooling import set_threads, write_json

DEFAULT_MODELS = ("asa-base-x2", "asa-base-x4", "photo-x2")
PRECISIONS = ("bf16", "fp32")


@dataclass
class CostRow:
    model: str
    precision: str
    tile: int
    forward_ms: float
    body_ms: float
    attention_share: float  # (forward - body) / forward
    free_core_ms: float  # the forward with the routed core replaced by zeros
    free_core_share: float  # (free core - body) / free core: the share no faster core removes
    tiered_ms: float  # the forward on the tiered path (equal to the forward where the kernel does not run)
    tiered_share: float  # (tiered - body) / tiered: the share before the fused kernel
    conv_gmacs: float  # multiply-accumulates of the conv body's convolutions, 1e9
    conv_tflops: float  # 2 * conv MACs / body time
    peak_tflops: float  # the CPU's measured GEMM peak in this dtype
    attention_blocks: int


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 8:
        raise argparse.ArgumentTypeError(f"tile sides must be integers >= 8, got {text!r}")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help=f"comma-separated model names with a scale (default {','.join(DEFAULT_MODELS)})")
    p.add_argument("--precision", default=",".join(PRECISIONS),
                   help="comma-separated precisions, bf16 and/or fp32 (default both)")
    p.add_argument("--tiles", type=int_list, default=[256, 512],
                   help="square LR tile sides, e.g. 256,512 (default those)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds; medians (default 5)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1; 0 = torch's choice)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="cpu",
                   help="this process's CPU time (default; steady on a shared machine) or wall time")
    p.add_argument("--image", help="picture to crop the tiles from (default: skimage's astronaut)")
    p.add_argument("--peak-size", type=int, default=1024,
                   help="side of the square matmul that measures the GEMM peak (default 1024)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


@contextlib.contextmanager
def attention_bypassed(net: nn.Module) -> Iterator[int]:
    """Every attention block of ``net`` returns its input while inside; yields how many there are."""
    blocks = [m for m in net.modules() if isinstance(m, AttentionBranch)]

    def identity(x: torch.Tensor, aux: dict | None = None) -> torch.Tensor:
        return x

    for m in blocks:
        m.forward = identity  # an instance attribute shadows the class's forward
    try:
        yield len(blocks)
    finally:
        for m in blocks:
            del m.forward


@contextlib.contextmanager
def routed_core_free() -> Iterator[None]:
    """While inside, the routed attention's core (fused or tiered) returns zeros at once (its output's
    shape and dtype): what is left of a forward is everything around the core."""
    original = routing.region_attention

    def free(q_rows: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        return torch.zeros_like(q_rows)

    routing.region_attention = free  # routed_attention looks it up in its module at each call
    try:
        yield
    finally:
        routing.region_attention = original


@torch.no_grad()
def conv_macs(net: nn.Module, x: torch.Tensor) -> int:
    """Multiply-accumulates of every ``nn.Conv2d`` that runs in ``net(x)``."""
    total = 0

    def hook(mod: nn.Conv2d, _inp: tuple, out: torch.Tensor) -> None:
        nonlocal total
        kh, kw = mod.kernel_size
        total += out.numel() * (mod.in_channels // mod.groups) * kh * kw

    handles = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, nn.Conv2d)]
    try:
        net(x)
    finally:
        for h in handles:
            h.remove()
    return total


def gemm_peak_tflops(dtype: torch.dtype, clock: Clock, size: int = 1024, rounds: int = 3) -> float:
    """TFLOP/s of a (size x size) @ (size x size) matmul in ``dtype``: best of ``rounds``."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    a @ b  # warm-up: oneDNN/BLAS picks and caches its kernel
    best = min(clock(lambda: a @ b) for _ in range(rounds))
    return 2 * size**3 / max(best, 1e-9) / 1e12


def load_picture(path: str | None) -> torch.Tensor:
    """(1, 3, H, W) float in [0, 1]: ``path``, or skimage's astronaut."""
    if path is None:
        from skimage import data

        arr = data.astronaut()
    else:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(path) as im:
                arr = np.asarray(im.convert("RGB"))
        except (OSError, UnidentifiedImageError) as e:
            raise CLIError(f"--image {path}: {e}") from None
    return torch.from_numpy(np.ascontiguousarray(arr)).permute(2, 0, 1)[None].float().div(255)


def centre_tile(picture: torch.Tensor, side: int) -> torch.Tensor:
    """A side x side centre crop (the picture is reflected first where it is smaller)."""
    h, w = picture.shape[-2:]
    if h < side or w < side:
        ph, pw = max(0, side - h), max(0, side - w)
        picture = torch.nn.functional.pad(picture, (0, pw, 0, ph), mode="replicate")
        h, w = picture.shape[-2:]
    top, left = (h - side) // 2, (w - side) // 2
    return picture[:, :, top : top + side, left : left + side]


def measure(net: nn.Module, x: torch.Tensor, clock: Clock, rounds: int) -> tuple[float, float, float, float]:
    """(forward, conv body, core free, tiered) seconds: medians of ``rounds`` interleaved rounds, order
    alternating; tiered is the forward itself where the kernel does not run."""
    def forward() -> object:
        return net(x)

    def body() -> object:
        with attention_bypassed(net):
            return net(x)

    def core_free() -> object:
        with routed_core_free():
            return net(x)

    def tiered() -> object:
        with native.tiered_only():
            return net(x)

    arms: dict[str, Callable[[], object]] = {"forward": forward, "body": body, "core_free": core_free}
    kernel_runs = isinstance(native.kernel(), native.Kernel)
    if x.device.type == "cpu" and x.dtype in native.DTYPE_CODES and kernel_runs:
        arms["tiered"] = tiered  # the kernel runs: time the path it replaced too
    for fn in arms.values():
        fn()  # warm-up: kernel choice, allocator
    times: dict[str, list[float]] = {k: [] for k in arms}
    for r in range(rounds):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in order:
            times[name].append(clock(arms[name]))
    medians = {name: statistics.median(t) for name, t in times.items()}
    fwd = medians["forward"]
    return fwd, medians["body"], medians["core_free"], medians.get("tiered", fwd)


def cost_row(name: str, precision: str, tile: int, net: nn.Module, picture: torch.Tensor, clock: Clock,
             rounds: int, peak: float) -> CostRow:
    dtype = next(net.parameters()).dtype
    x = centre_tile(picture, tile).to(dtype).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        with attention_bypassed(net) as blocks:
            macs = conv_macs(net, x)
        fwd, body, free, tiered = measure(net, x, clock, rounds)
    return CostRow(
        model=name, precision=precision, tile=tile, forward_ms=fwd * 1e3, body_ms=body * 1e3,
        attention_share=max(0.0, (fwd - body) / fwd), free_core_ms=free * 1e3,
        free_core_share=max(0.0, (free - body) / free), tiered_ms=tiered * 1e3,
        tiered_share=max(0.0, (tiered - body) / tiered), conv_gmacs=macs / 1e9,
        conv_tflops=2 * macs / max(body, 1e-9) / 1e12, peak_tflops=peak, attention_blocks=blocks,
    )


def table(rows: list[CostRow]) -> str:
    head = ("| model | precision | tile | forward ms | conv body ms | attention share | share, core free "
            "| tiered ms | share, tiered | conv TFLOP/s | of GEMM peak |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.precision} | {r.tile}^2 | {r.forward_ms:.1f} | {r.body_ms:.1f} "
            f"| {100 * r.attention_share:.1f}% | {100 * r.free_core_share:.1f}% | {r.tiered_ms:.1f} "
            f"| {100 * r.tiered_share:.1f}% | {r.conv_tflops:.2f} "
            f"| {100 * r.conv_tflops / r.peak_tflops:.0f}% of {r.peak_tflops:.2f} |"
        )
    return "\n".join(lines)


def _names(text: str, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise CLIError(f"--{what} names nothing: {text!r}")
    return names


def run(args: argparse.Namespace) -> int:
    precisions = _names(args.precision, "precision")
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad:
        raise CLIError(f"--precision: unknown {', '.join(bad)}; choose from {', '.join(PRECISIONS)}")
    if args.rounds < 1:
        raise CLIError(f"--rounds must be >= 1, got {args.rounds}")
    if args.peak_size < 16:
        raise CLIError(f"--peak-size must be >= 16, got {args.peak_size}")
    if args.json and not Path(args.json).parent.is_dir():
        raise CLIError(f"--json {args.json}: folder {Path(args.json).parent} does not exist")
    set_threads(args.threads)
    device = torch.device("cpu")
    clock = Clock(args.clock, device)
    picture = load_picture(args.image)
    peaks = {p: gemm_peak_tflops(DTYPES[p], clock, args.peak_size) for p in precisions}
    print(f"cost of one LR tile on {device}, {torch.get_num_threads()} threads, {args.clock} clock, "
          f"median of {args.rounds} interleaved rounds; attention kernel: {native.kernel_status()}; "
          "GEMM peak "
          + ", ".join(f"{p} {v:.2f} TFLOP/s" for p, v in peaks.items()), flush=True)
    rows: list[CostRow] = []
    for name in _names(args.models, "models"):
        for precision in precisions:
            try:
                up = Upscaler(name, device="cpu", precision=precision, threads=args.threads or None)
                if len(up.scales) != 1:
                    raise CLIError(f"--models {name!r} is a family ({up.scales}); name one scale, e.g. "
                                   f"{name}-x2")
                net = up.network(up.scales[0])
            except UpscaleError as e:
                raise CLIError(str(e)) from None
            for tile in args.tiles:
                row = cost_row(name, precision, tile, net, picture, clock, args.rounds, peaks[precision])
                rows.append(row)
                print(f"  {name} {precision} {tile}^2: forward {row.forward_ms:.1f} ms, "
                      f"body {row.body_ms:.1f} ms, core free {row.free_core_ms:.1f} ms, "
                      f"tiered {row.tiered_ms:.1f} ms", flush=True)
    print(table(rows))
    if args.json:
        write_json(args.json, {"config": run_config(args, device), "peaks_tflops": peaks,
                               "attention_kernel": native.kernel_status(),
                               "rows": [asdict(r) for r in rows]})
    return 0
