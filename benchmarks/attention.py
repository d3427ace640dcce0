"""``sr bench attention``: time and peak memory of the attention family by feature-map size.

Every method is one attention block (C = 48, 3 heads, stride 1, batch 1) with the same q/k/v/LePE/
projection weights; what is timed is the attention core ``attend(q, k, v)`` (the part that differs
between kinds). The 1x1 q/k/v conv, LePE and output projection that every kind shares are timed once
per size as the ``projections`` row, so a block's total is core + projections.

Methods: ``dense-textbook`` (``sr.models.attention.attention``: the (HW)^2 matrix materialised),
``dense-sdpa`` (PyTorch's fused SDPA), ``window`` (8x8, shifted, with its mask), ``topk`` (4x4
regions, k = 4), ``adaptive-b4`` / ``adaptive-b2`` (ASA, k in [0, 8], budget 4 or 2, inference
path). Both adaptive methods share their weights; the gate is re-initialised (``--gate spread``) so
budgets spread over 0..8 as they do on real images (there the detail prior spreads them by content;
the benchmark's random features have near-uniform variance, so a fresh gate would give uniform k).

Inputs: ``--features random`` (default) feeds Gaussian features; ``--features photo`` feeds what the
shipped model (``--model``, default asa-base-x2) computes at its first attention block for a real
photograph (skimage's astronaut, centre crop of side ``stride * size``, after the block's stride
pooling), and every method takes that block's trained q/k/v, LePE, projection and gate weights. That
is the setting the budget is for: flat regions (sky, skin, background) get k = 0 and skip attention.

Timing: min over ``--repeat`` calls, methods interleaved so that load from other processes hits all
of them alike. ``--clock cpu`` measures this process's CPU time instead of wall time: on a machine
shared with other jobs it is far more stable (use it with ``--threads 1``).

Peak memory: bytes allocated above the level before the call, from the PyTorch profiler's allocation
events (``profile_memory=True``: every CPU allocation and free through PyTorch's allocator, scratch
buffers inside kernels included), replayed in time order; on CUDA, ``torch.cuda.max_memory_allocated``.
The profiled call is the warm-up call and is not timed.

A method is skipped (``skipped: est. ...``) when its estimate, extrapolated from the previous size
(quadratic for the dense kinds), exceeds ``--max-gib`` or ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from sr.errors import CLIError
from sr.inference.devices import DeviceError, resolve_device
from sr.models.attention import (
    AdaptiveSparseAttention,
    AttentionBranch,
    DenseAttention,
    attention,
    make_attention,
)
from sr.models.attention.common import merge_heads, split_heads
from sr.weights import WeightsError, load_model

from .tooling import comma_choices, set_threads, write_json

METHODS = ("dense-textbook", "dense-sdpa", "window", "topk", "adaptive-b4", "adaptive-b2")
# Method -> (registered attention kind, block index, options), built through the registry as the
# network builds them; index 1 makes the window block a shifted one (with its mask). dense-textbook
# is the one method that is no registered kind (TextbookDense below).
METHOD_KINDS: dict[str, tuple[str, int, dict]] = {
    "dense-sdpa": ("dense", 0, {}),
    "window": ("window", 1, {"window": 8}),
    "topk": ("topk", 0, {"region": 4, "k": 4}),
    "adaptive-b4": ("adaptive", 0, {"region": 4, "k_min": 0, "k_max": 8, "budget": 4.0}),
    "adaptive-b2": ("adaptive", 0, {"region": 4, "k_min": 0, "k_max": 8, "budget": 2.0}),
}
REFERENCE = "dense-sdpa"
QUADRATIC = ("dense-textbook", "dense-sdpa")
GIB = 2**30


class TextbookDense(DenseAttention):
    """Dense attention through the textbook function that materialises the (HW) x (HW) matrix."""

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        q, k, v = (split_heads(t.flatten(2).transpose(1, 2), self.heads) for t in (q, k, v))
        out, _ = attention(q, k, v)  # (B, heads, HW, d); the weights (B, heads, HW, HW) are dropped
        return merge_heads(out).transpose(1, 2).reshape(b, c, h, w)


# --- arguments ----------------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values




def add_timing_arguments(p: argparse.ArgumentParser) -> None:
    """--threads, --clock and --device, shared with ``sr bench train``."""
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time, or this process's CPU time (stable on a shared machine; CPU only)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default: cuda when present)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=_int_list, default=[32, 64, 128, 256],
                   help="feature-map sides, e.g. 32,64,128,256 (N = side^2 tokens; default: those)")
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma-separated subset of {', '.join(METHODS)} (default: all)")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per method and size (default 3)")
    p.add_argument("--backward", action="store_true", help="also time forward+backward (training paths)")
    add_timing_arguments(p)
    p.add_argument("--gate", choices=("spread", "init"), default="spread",
                   help="adaptive gate: budgets spread over 0..8 as on real images (default), "
                        "or as initialised")
    p.add_argument("--features", choices=("random", "photo"), default="random",
                   help="inputs: Gaussian features (default) or a photograph's features at the first "
                        "attention block of --model, with that block's trained weights")
    p.add_argument("--model", default="asa-base-x2",
                   help="shipped model name or .safetensors file for --features photo (default asa-base-x2)")
    p.add_argument("--channels", type=int, default=48, help="channels C (default 48)")
    p.add_argument("--heads", type=int, default=3, help="attention heads (default 3)")
    p.add_argument("--max-gib", type=float, default=4.0,
                   help="skip a method whose estimated peak memory exceeds this (default 4)")
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="skip a method whose estimated time per call exceeds this (default 60)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and inputs (default 0)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


# --- measurement ----------------------------------------------------------------------------------


class Clock:
    """Seconds for one call: wall time (synchronising CUDA) or the process's CPU time."""

    def __init__(self, kind: str, device: torch.device) -> None:
        if kind == "cpu" and device.type != "cpu":
            raise CLIError(f"--clock cpu measures CPU time and cannot time {device}; use --clock wall")
        self.kind, self.device = kind, device

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.process_time() if self.kind == "cpu" else time.perf_counter()

    def __call__(self, fn: Callable[[], object]) -> float:
        start = self._now()
        fn()
        return self._now() - start


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """Silence fd 2 (the profiler's native library logs a start/stop line per use there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _cpu_peak_bytes(fn: Callable[[], object]) -> int | None:
    """Peak bytes allocated during fn() above the level at its start, from profiler memory events."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    try:  # the allocation events live in the profiler's event tree (an internal API: fail soft)
        from torch._C._profiler import _EventType

        events: list[tuple[int, int]] = []
        stack = list(prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            node = stack.pop()
            if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
                events.append((node.start_time_ns, node.extra_fields.alloc_size))
            stack.extend(node.children)
    except (AttributeError, ImportError, RuntimeError):
        return None
    level = peak = 0
    for _, size in sorted(events):
        level += size
        peak = max(peak, level)
    return peak


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int | None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    return _cpu_peak_bytes(fn)


# --- the methods ------------------------------------------------------------------------------------


def spread_gate(module: AdaptiveSparseAttention, seed: int) -> None:
    """Give the gate's output layer a larger random init so region budgets spread over [k_min, k_max]."""
    g = torch.Generator().manual_seed(seed + 1)
    last = module.gate.net[-1]
    with torch.no_grad():
        last.weight.copy_(torch.randn(last.weight.shape, generator=g) * 0.5)


def build_methods(
    names: list[str], channels: int, heads: int, gate: str, seed: int
) -> dict[str, AttentionBranch]:
    """One block per method, all sharing the q/k/v, LePE and projection weights of the first."""
    torch.manual_seed(seed)

    def build(name: str) -> AttentionBranch:
        if name == "dense-textbook":
            return TextbookDense(channels, heads)
        kind, index, options = METHOD_KINDS[name]
        return make_attention(kind, channels, heads, index, **options)

    modules = {name: build(name) for name in names}
    shared = next(iter(modules.values())).state_dict()
    shared = {k: v for k, v in shared.items() if not k.startswith("gate.")}
    gate_state = None
    for m in modules.values():
        m.load_state_dict(shared, strict=False)
        if isinstance(m, AdaptiveSparseAttention):
            if gate_state is None:
                if gate == "spread":
                    spread_gate(m, seed)
                gate_state = m.gate.state_dict()
            m.gate.load_state_dict(gate_state)  # both budgets see the same gate
    return modules


class PhotoFeatures:
    """A photograph's features at the first attention block of a trained model, by map side."""

    def __init__(self, model_name: str, device: torch.device) -> None:
        from skimage import data  # a test-data package: only this feature needs it

        try:
            model = load_model(model_name).net
        except WeightsError as e:
            raise CLIError(str(e)) from None
        blocks = [m for m in model.modules() if isinstance(m, AdaptiveSparseAttention)]
        if not blocks:
            raise CLIError(f"{model_name} has no adaptive attention block to take features from")
        model = model.eval().to(device).to(memory_format=torch.channels_last)
        self.model, self.block, self.device = model, blocks[0], device
        photo = torch.from_numpy(data.astronaut())  # (512, 512, 3) uint8
        self.image = photo.permute(2, 0, 1)[None].float().div(255)  # (1, 3, 512, 512)
        self.max_size = min(self.image.shape[-2:]) // self.block.stride

    def __call__(self, size: int) -> torch.Tensor:
        """(1, C, size, size): the block's input, stride-pooled as the block itself pools it."""
        if size > self.max_size:
            raise CLIError(f"--features photo supports sizes up to {self.max_size} (the photo is "
                           f"{self.image.shape[-1]} px, the block's stride {self.block.stride}); got {size}")
        side = size * self.block.stride
        top, left = ((n - side) // 2 for n in self.image.shape[-2:])
        crop = self.image[:, :, top : top + side, left : left + side].to(self.device)
        crop = crop.contiguous(memory_format=torch.channels_last)
        captured: list[torch.Tensor] = []
        hook = self.block.register_forward_pre_hook(lambda mod, inp: captured.append(inp[0]))
        try:
            with torch.inference_mode():
                self.model(crop)
        finally:
            hook.remove()
        x = captured[0]
        if self.block.stride > 1:
            x = F.avg_pool2d(x, self.block.stride, ceil_mode=True)
        return x.clone()

    def share_weights(self, modules: dict[str, AttentionBranch]) -> None:
        """Every method takes the block's trained projections; adaptive ones its trained gate too."""
        state = self.block.state_dict()
        shared = {k: v for k, v in state.items() if not k.startswith("gate.")}
        for m in modules.values():
            m.load_state_dict(shared, strict=False)
            if isinstance(m, AdaptiveSparseAttention):
                m.gate.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("gate.")})
                m.gate.detail_prior = self.block.gate.detail_prior


@dataclass
class Row:
    size: int
    tokens: int
    method: str
    fwd_ms: float | None = None
    fwd_peak_mib: float | None = None
    fwdbwd_ms: float | None = None
    fwdbwd_peak_mib: float | None = None
    skipped: str | None = None
    extra: dict = field(default_factory=dict)


def _extrapolate(prev: dict[str, tuple[float | None, float | None]], method: str, size: int,
                 prev_size: int | None) -> tuple[float | None, float | None]:
    """(ms, MiB) at ``size`` from the previous size's measured or estimated figures.

    Dense kinds grow with N^2 = side^4; the others are taken as linear in N (a lower bound for them).
    """
    if prev_size is None or method not in prev:
        return None, None
    power = 2.0 if method in QUADRATIC else 1.0
    factor = ((size / prev_size) ** 2) ** power
    ms, mib = prev[method]
    return (None if ms is None else ms * factor), (None if mib is None else mib * factor)


def _textbook_bytes(size: int, heads: int, backward: bool) -> float:
    """The (HW)^2 score, scaled-score and weight matrices of one call (twice that with backward)."""
    return 3 * heads * float(size) ** 4 * 4 * (2 if backward else 1)


def run_size(size: int, modules: dict[str, AttentionBranch], args: argparse.Namespace, device: torch.device,
             clock: Clock, prev: dict[str, tuple[float | None, float | None]], prev_size: int | None,
             features: Callable[[int], torch.Tensor] | None = None,
             ) -> tuple[dict[str, Row], dict[str, tuple[float | None, float | None]]]:
    """Measure every method at one size; returns the rows and the (ms, MiB) figures for extrapolation.

    ``features(size)`` gives the input map (default: Gaussian features from ``args.seed``).
    """
    c = args.channels
    if features is not None:
        x = features(size)
    else:
        g = torch.Generator().manual_seed(args.seed + size)
        x = torch.randn(1, c, size, size, generator=g).to(device)
    x = x.contiguous(memory_format=torch.channels_last)  # the engine's layout (sr.inference.engine)
    any_module = next(iter(modules.values()))
    with torch.no_grad():
        q, k, v = any_module.qkv(x).chunk(3, dim=1)  # identical for every method (shared weights)
    rows = {name: Row(size, size * size, name) for name in modules}

    # Skip what would not fit or take too long, from estimates (once skipped, larger sizes are too).
    estimates: dict[str, tuple[float | None, float | None]] = {}
    for name, row in rows.items():
        est_ms, est_mib = _extrapolate(prev, name, size, prev_size)
        if name == "dense-textbook":
            est_mib = max(est_mib or 0.0, _textbook_bytes(size, args.heads, args.backward) / 2**20)
        estimates[name] = (est_ms, est_mib)
        if est_mib is not None and est_mib * 2**20 > args.max_gib * GIB:
            row.skipped = f"est. {est_mib * 2**20 / GIB:.1f} GiB > {args.max_gib:g} GiB"
        elif est_ms is not None and est_ms / 1000 > args.max_seconds:
            row.skipped = f"est. {est_ms / 1000:.0f} s > {args.max_seconds:g} s"

    active = {name: m for name, m in modules.items() if rows[name].skipped is None}

    def forward(m: AttentionBranch, aux: dict | None = None) -> Callable[[], object]:
        def call() -> object:
            with torch.inference_mode():
                return m.attend(q, k, v, x, aux)
        return call

    def forward_backward(m: AttentionBranch) -> Callable[[], object]:
        def call() -> None:
            qq, kk, vv, xx = (t.detach().requires_grad_() for t in (q, k, v, x))
            m.attend(qq, kk, vv, xx, None).float().square().mean().backward()
        return call

    for m in active.values():
        m.eval()
    # Warm-up + memory (one profiled call each), and the adaptive budget statistics.
    for name, m in active.items():
        peak = peak_bytes(forward(m), device)
        rows[name].fwd_peak_mib = None if peak is None else peak / 2**20
        if isinstance(m, AdaptiveSparseAttention):
            aux: dict = {}
            forward(m, aux)()
            kmap = aux["budget_maps"][0]
            rows[name].extra = {"mean_k": round(float(kmap.mean()), 3), "regions": (size // 4) ** 2,
                                "gathered_regions": aux["gathered_regions"][0]}
    times: dict[str, list[float]] = {name: [] for name in active}
    for _ in range(args.repeat):
        for name, m in active.items():
            times[name].append(clock(forward(m)))
    for name in active:
        rows[name].fwd_ms = 1000 * min(times[name])

    if args.backward:
        for m in active.values():
            m.train()
        for name, m in active.items():
            peak = peak_bytes(forward_backward(m), device)
            rows[name].fwdbwd_peak_mib = None if peak is None else peak / 2**20
        btimes: dict[str, list[float]] = {name: [] for name in active}
        for _ in range(args.repeat):
            for name, m in active.items():
                btimes[name].append(clock(forward_backward(m)))
                m.zero_grad(set_to_none=True)
        for name in active:
            rows[name].fwdbwd_ms = 1000 * min(btimes[name])
        for m in active.values():
            m.eval()

    # The projections every block shares (not attention): qkv 1x1 conv, LePE, output projection.
    def projections() -> object:
        with torch.inference_mode():
            qkv = any_module.qkv(x)
            out = qkv[:, 2 * c :] if any_module.lepe is None else any_module.lepe(qkv[:, 2 * c :])
            return x + any_module.proj(out)
    projections()
    proj = Row(size, size * size, "projections")
    proj.fwd_ms = 1000 * min(clock(projections) for _ in range(args.repeat))
    rows["projections"] = proj
    for name in active:  # measured figures replace the estimates (the backward ones are larger)
        r = rows[name]
        estimates[name] = (r.fwdbwd_ms or r.fwd_ms, r.fwdbwd_peak_mib or r.fwd_peak_mib)
    return rows, estimates


# --- report -------------------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _ratio(ref: float | None, value: float | None) -> float | None:
    return ref / value if ref and value else None


def table(rows: list[Row], backward: bool) -> str:
    head = f"{'size':>9} {'tokens':>6}  {'method':<15}{'fwd ms':>10} {'speed-up':>9} {'peak MiB':>10}"
    head += f" {'mem':>7}"
    if backward:
        head += f" {'fwd+bwd ms':>11} {'speed-up':>9} {'peak MiB':>10}"
    lines = [head, "-" * len(head)]
    by_size: dict[int, list[Row]] = {}
    for r in rows:
        by_size.setdefault(r.size, []).append(r)
    for size, group in by_size.items():
        ref = next((r for r in group if r.method == REFERENCE), None)
        for r in group:
            tokens = f"{r.tokens // 1024}K" if r.tokens >= 1024 else str(r.tokens)
            line = f"{f'{size}x{size}':>9} {tokens:>6}  {r.method:<15}"
            if r.skipped:
                lines.append(line + f"skipped: {r.skipped}")
                continue
            speed = _ratio(ref and ref.fwd_ms, r.fwd_ms) if r.method != "projections" else None
            mem = (r.fwd_peak_mib / ref.fwd_peak_mib) if ref and ref.fwd_peak_mib and r.fwd_peak_mib else None
            line += f"{_fmt(r.fwd_ms):>10} {_fmt(speed, '.2f') + 'x' if speed else '-':>9} "
            line += f"{_fmt(r.fwd_peak_mib):>10} {_fmt(mem, '.2f') + 'x' if mem else '-':>7}"
            if backward and r.method != "projections":
                bspeed = _ratio(ref and ref.fwdbwd_ms, r.fwdbwd_ms)
                line += f" {_fmt(r.fwdbwd_ms):>11} {_fmt(bspeed, '.2f') + 'x' if bspeed else '-':>9}"
                line += f" {_fmt(r.fwdbwd_peak_mib):>10}"
            if r.extra:
                line += f"   mean k {r.extra['mean_k']:.2f}, {r.extra['gathered_regions']} regions gathered"
            lines.append(line)
    return "\n".join(lines)


def _slope(rows: list[Row], method: str, key: str) -> float | None:
    """Log-log growth exponent of ``key`` with N between the smallest and largest measured sizes."""
    pts = [(r.tokens, getattr(r, key)) for r in rows if r.method == method and getattr(r, key)]
    if len(pts) < 2:
        return None
    (n0, y0), (n1, y1) = pts[0], pts[-1]
    return math.log(y1 / y0) / math.log(n1 / n0)


def checks(rows: list[Row]) -> dict:
    """The figures the design promises, computed from this run (None where a method was not run)."""
    get = {(r.size, r.method): r for r in rows}
    out: dict = {"speedup_vs_dense_sdpa": {}, "budget_halving_time_cut": {}}
    for size in sorted({r.size for r in rows}):
        ref, a4, a2 = (get.get((size, m)) for m in (REFERENCE, "adaptive-b4", "adaptive-b2"))
        if ref and a4 and ref.fwd_ms and a4.fwd_ms:
            out["speedup_vs_dense_sdpa"][size] = round(ref.fwd_ms / a4.fwd_ms, 2)
        if a4 and a2 and a4.fwd_ms and a2.fwd_ms:
            out["budget_halving_time_cut"][size] = round(1 - a2.fwd_ms / a4.fwd_ms, 3)
    out["peak_memory_growth_exponent"] = {
        m: round(s, 2) for m in METHODS if (s := _slope(rows, m, "fwd_peak_mib")) is not None
    }
    return out




def pick_device(name: str) -> torch.device:
    """CPU or CUDA (what the memory measurement supports), resolved like the engine's devices."""
    try:
        device = resolve_device(name)
    except DeviceError as e:
        raise CLIError(str(e)) from None
    if device.type not in ("cpu", "cuda"):
        raise CLIError(f"unsupported device {name!r}; use cpu or cuda")
    return device




def run_config(args: argparse.Namespace, device: torch.device) -> dict:
    """The options of this run plus what decides its numbers (device, threads, torch version)."""
    options = {k: v for k, v in vars(args).items() if not k.startswith("_") and k not in ("command", "bench")}
    return options | {"device": str(device), "threads": torch.get_num_threads(), "torch": torch.__version__}


def run(args: argparse.Namespace) -> int:
    methods = comma_choices(args.methods, METHODS, "method(s)")
    if args.repeat < 1:
        raise CLIError(f"--repeat must be >= 1, got {args.repeat}")
    if args.channels < 1 or args.heads < 1 or args.channels % args.heads:
        raise CLIError(f"--channels {args.channels} must be a positive multiple of --heads {args.heads}")
    if args.json:  # fail before the (long) run, not after it
        parent = Path(args.json).parent
        if not parent.is_dir():
            raise CLIError(f"--json {args.json}: folder {parent} does not exist")
    set_threads(args.threads)
    device = pick_device(args.device)
    clock = Clock(args.clock, device)
    photo = PhotoFeatures(args.model, device) if args.features == "photo" else None
    if photo is not None:
        args.channels, args.heads = photo.block.dim, photo.block.heads  # the block's own shape
        if max(args.sizes) > photo.max_size:
            photo(max(args.sizes))  # the clear error, before any measuring
    modules = {name: m.to(device) for name, m in
               build_methods(methods, args.channels, args.heads, args.gate, args.seed).items()}
    if photo is not None:
        photo.share_weights(modules)

    inputs = f"photo features of {args.model}" if photo else "random features"
    print(f"attention core, batch 1, C={args.channels}, {args.heads} heads, stride 1, {inputs}, "
          f"channels-last; device {device}, {torch.get_num_threads()} threads, {args.clock} clock, "
          f"min of {args.repeat}", flush=True)
    rows: list[Row] = []
    prev: dict[str, tuple[float | None, float | None]] = {}
    prev_size = None
    for size in sorted(set(args.sizes)):
        result, prev = run_size(size, modules, args, device, clock, prev, prev_size, photo)
        rows.extend(result.values())
        prev_size = size
        print(f"  {size}x{size} done", flush=True)
    print(table(rows, args.backward))
    summary = checks(rows)
    print("speed-up of adaptive-b4 vs dense-sdpa:", summary["speedup_vs_dense_sdpa"] or "-")
    print("time cut from halving the budget (4 -> 2):", summary["budget_halving_time_cut"] or "-")
    print("peak-memory growth exponent (memory ~ N^e):", summary["peak_memory_growth_exponent"] or "-")
    if args.json:
        write_json(args.json, {
            "config": run_config(args, device),
            "rows": [asdict(r) for r in rows],
            "checks": summary,
        })
    return 0
