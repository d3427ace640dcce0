"""``sr bench attention`` (or ``python -m benchmarks.attention``): time and peak memory of every
registered attention kind by feature-map size, in fp32 and bf16, against dense attention.

Every method is one attention block (C = 48, 3 heads, stride 1, batch 1) with the same q/k/v, LePE
and projection weights (those of one dense block; the gating kinds, whose input projection makes v
alone, take its v third); what is timed is the attention core ``attend(q, k, v)`` (the part that
differs between kinds). The input projection, LePE and output projection are timed once per size as
the ``projections`` row (``projections-v`` for the gating kinds' v-only projection), so a block's
total is core + projections.

Methods: one per registered kind (``attention_kinds()``: a kind that a new file of
``sr.models.attention``, a plugin or a test registers is listed with no edit here), built through the
registry with its default options (block index 0), except: ``dense`` runs as ``dense-textbook``
(``sr.models.attention.attention``: the N x N matrix materialised) and ``dense-sdpa`` (PyTorch's
fused SDPA: the reference of every speed-up and crossing); ``window`` is 8x8 and shifted (index 1),
with its mask; ``topk`` has 4x4 regions, k = 4; ``adaptive`` runs as ``adaptive-b4`` /
``adaptive-b2`` (ASA, k in [0, 8], budget 4 or 2, inference path). Both adaptive methods share their
weights; the gate is re-initialised (``--gate spread``) so budgets spread over 0..8 as they do on real
images (there the detail prior spreads them by content; the benchmark's random features have
near-uniform variance, so a fresh gate would give uniform k). ``none`` has no block, nothing to
time. The legend printed first gives each kind's expected cost (:data:`COMPLEXITY`).

Precision (``--dtypes``, default both): fp32, and bf16 as the engine runs it (the block and its
inputs cast to bfloat16); with ``--backward``, bf16's forward+backward runs the fp32 block under bf16
autocast, as training does.

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

Dense at large maps: ``dense-textbook`` holds 3 x heads N x N matrices (scores, scaled scores,
weights): at 256x256 (N = 65536) that is 144 GiB in fp32, which no machine here has. Such a cell is
not run and reads ``out of memory: N x N scores need ...`` with the bytes it would take (any size
above ``--max-gib``). ``dense-sdpa`` never holds the matrix (the fused kernel streams blocks of keys
past blocks of queries; its peak column grows as N), so dense runs at every size through it, and its
curve is the one the crossings are read from. Other methods are skipped (``skipped: est. ...``) when
their estimate, extrapolated from the previous size (quadratic for the dense methods, linear for the
rest), exceeds ``--max-gib`` or ``--max-seconds``; a method that still runs out of memory, or fails,
is marked so in its cell and the run goes on.

Crossings: where each method's forward time crosses dense-sdpa's, per dtype: interpolated on log-log
axes between the two sizes around it; "faster at every size run" when it is below dense from the
smallest size; extrapolated from its growth relative to dense over the last two sizes when it is
slower at every size.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
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
    attention_kinds,
    make_attention,
)
from sr.models.attention.common import merge_heads, split_heads
from sr.weights import WeightsError, load_model

from .tooling import comma_choices, set_threads, write_json

# Methods of the kinds that run as more than one method or with options other than their defaults:
# method -> (registered kind, block index, options), built through the registry as the network builds
# them; index 1 makes the window block a shifted one (with its mask). dense-textbook is built as
# TextbookDense below. Every other registered kind is one method of its own name, its defaults, index 0.
METHOD_KINDS: dict[str, tuple[str, int, dict]] = {
    "dense-textbook": ("dense", 0, {}),
    "dense-sdpa": ("dense", 0, {}),
    "window": ("window", 1, {"window": 8}),
    "topk": ("topk", 0, {"region": 4, "k": 4}),
    "adaptive-b4": ("adaptive", 0, {"region": 4, "k_min": 0, "k_max": 8, "budget": 4.0}),
    "adaptive-b2": ("adaptive", 0, {"region": 4, "k_min": 0, "k_max": 8, "budget": 2.0}),
}
REFERENCE = "dense-sdpa"
QUADRATIC = ("dense-textbook", "dense-sdpa")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
GIB = 2**30

# Expected cost of one block's core, by kind: N tokens (H W), C channels, d = C / heads, with the
# options this benchmark builds them with. A kind missing here is listed as "not stated".
COMPLEXITY = {
    "none": "no attention block: nothing to time",
    "dense": "O(N^2 d); memory O(N^2) materialised (textbook), O(N) fused (SDPA)",
    "window": "O(N w^2 d), w x w windows (w = 8)",
    "topk": "O(N^2 C / p^4) pooled routing + O(N k p^2 d) (p = 4, k = 4)",
    "adaptive": "as topk, k = the mean budget (4 or 2 of k_max 8); k = 0 regions skip",
    "local": "O(N k^2 d), the k x k neighbourhood of every token",
    "dilated": "O(N w^2 d), w x w windows of every d-th token",
    "linear": "O(N d^2) per head, a d x d key-value summary",
    "channel": "O(N C), one global mean and a gate per channel",
    "channel-sa": "O(N C^2 / heads), d x d channel scores per head over all N tokens",
    "spatial": "O(N C + N k^2), channel mean/max maps and one k x k conv",
    "cbam": "O(N C + N k^2), a channel gate, then the spatial map",
}


class TextbookDense(DenseAttention):
    """Dense attention through the textbook function that materialises the (HW) x (HW) matrix."""

    def attend(self, q, k, v, x, aux):
        b, c, h, w = q.shape
        q, k, v = (split_heads(t.flatten(2).transpose(1, 2), self.heads) for t in (q, k, v))
        out, _ = attention(q, k, v)  # (B, heads, HW, d); the weights (B, heads, HW, HW) are dropped
        return merge_heads(out).transpose(1, 2).reshape(b, c, h, w)


def kind_methods() -> dict[str, list[str]]:
    """Every registered kind -> its methods here, in registration order ('none' has none)."""
    out: dict[str, list[str]] = {}
    for kind in attention_kinds():
        named = [m for m, (k, _, _) in METHOD_KINDS.items() if k == kind]
        out[kind] = [] if kind == "none" else named or [kind]
    return out


def method_names() -> list[str]:
    """Every method, kind by kind in registration order."""
    return [m for methods in kind_methods().values() for m in methods]


def method_kind(method: str) -> str:
    return METHOD_KINDS.get(method, (method,))[0]


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
    p.add_argument("--methods", default="all",
                   help="comma-separated methods (default: all, one or more per registered kind: "
                        f"{', '.join(method_names())})")
    p.add_argument("--dtypes", default=",".join(DTYPES),
                   help=f"comma-separated precisions, of {', '.join(DTYPES)} (default: both)")
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


# --- the methods ------------------------------------------------------------------------------------


def spread_gate(module: AdaptiveSparseAttention, seed: int) -> None:
    """Give the gate's output layer a larger random init so region budgets spread over [k_min, k_max]."""
    g = torch.Generator().manual_seed(seed + 1)
    last = module.gate.net[-1]
    with torch.no_grad():
        last.weight.copy_(torch.randn(last.weight.shape, generator=g) * 0.5)


def share_weights(state: dict[str, torch.Tensor], modules: dict[str, AttentionBranch]) -> None:
    """Load ``state``'s projection weights (an attention block's, its gate's left out) into every module
    that has them at that shape; a module whose input projection makes v alone takes the v third."""
    for m in modules.values():
        own = m.state_dict()
        take = {}
        for key, tensor in state.items():
            if key.startswith("gate.") or key not in own:
                continue
            if own[key].shape == tensor.shape:
                take[key] = tensor
            elif key.startswith("qkv.") and 3 * own[key].shape[0] == tensor.shape[0]:
                take[key] = tensor[2 * own[key].shape[0]:]  # q, k, v stacked: the v third
        m.load_state_dict(take, strict=False)


def build_methods(
    names: list[str], channels: int, heads: int, gate: str, seed: int
) -> tuple[dict[str, AttentionBranch], dict[str, str]]:
    """One block per method, all with the projection weights of one dense block, and the methods that
    cannot be built at this shape (-> why): a kind registered elsewhere may refuse some widths."""
    torch.manual_seed(seed)
    source = DenseAttention(channels, heads).state_dict()
    modules: dict[str, AttentionBranch] = {}
    failed: dict[str, str] = {}
    for name in names:
        try:
            if name == "dense-textbook":
                module = TextbookDense(channels, heads)
            else:
                kind, index, options = METHOD_KINDS.get(name, (name, 0, {}))
                module = make_attention(kind, channels, heads, index, **options)
        except (TypeError, ValueError) as e:
            failed[name] = f"cannot build: {e}"
            continue
        if not isinstance(module, AttentionBranch):
            failed[name] = f"not an attention block ({type(module).__name__}): nothing to time"
            continue
        modules[name] = module
    share_weights(source, modules)
    gate_state = None
    for m in modules.values():
        if isinstance(m, AdaptiveSparseAttention):
            if gate_state is None:
                if gate == "spread":
                    spread_gate(m, seed)
                gate_state = m.gate.state_dict()
            m.gate.load_state_dict(gate_state)  # both budgets see the same gate
    return modules, failed


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
        share_weights(state, modules)
        for m in modules.values():
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
    skipped: str | None = None  # why the cell was not measured: an estimate, out of memory, a failure
    extra: dict = field(default_factory=dict)
    dtype: str = "fp32"
    kind: str = ""  # the registered kind ("" for the projection rows)


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


def _textbook_bytes(size: int, heads: int, backward: bool, element: int = 4) -> float:
    """The (HW)^2 score, scaled-score and weight matrices of one call (twice that with backward)."""
    return 3 * heads * float(size) ** 4 * element * (2 if backward else 1)


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _attempt(row: Row, fn: Callable[[], object]) -> tuple[bool, object]:
    """(True, fn()), or (False, None) with the row marked: out of memory, or the error. A kind that
    another file registers may fail at some size or precision; the run goes on without it."""
    try:
        return True, fn()
    except Exception as e:  # noqa: BLE001 - reported in the row, not swallowed
        text = str(e).strip()
        if isinstance(e, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate" in text:
            row.skipped = "out of memory at run time"
        else:
            row.skipped = f"failed: {type(e).__name__}: {text.splitlines()[0] if text else ''}"[:160]
        return False, None


def run_size(size: int, modules: dict[str, AttentionBranch], args: argparse.Namespace, device: torch.device,
             clock: Clock, prev: dict[str, tuple[float | None, float | None]], prev_size: int | None,
             features: Callable[[int], torch.Tensor] | None = None, dtype: str = "fp32",
             train_modules: dict[str, AttentionBranch] | None = None, failed: dict[str, str] | None = None,
             ) -> tuple[dict[str, Row], dict[str, tuple[float | None, float | None]]]:
    """Measure every method at one size and precision; returns the rows (one per method, then the
    projection rows) and the (ms, MiB) figures for extrapolation.

    ``modules``: the blocks in ``dtype``; ``train_modules``: the same in fp32, which ``--backward``
    runs (under bf16 autocast for bf16; default: ``modules``); ``failed``: methods that could not be
    built (-> why), rows of their own. ``features(size)`` gives the input map (default: Gaussian
    features from ``args.seed``).
    """
    c, element = args.channels, DTYPES[dtype].itemsize
    train_modules = modules if train_modules is None else train_modules
    if features is not None:
        x32 = features(size)
    else:
        g = torch.Generator().manual_seed(args.seed + size)
        x32 = torch.randn(1, c, size, size, generator=g).to(device)
    x32 = x32.contiguous(memory_format=torch.channels_last)  # the engine's layout (sr.inference.engine)
    x = x32.to(DTYPES[dtype])
    rows = {name: Row(size, size * size, name, dtype=dtype, kind=method_kind(name)) for name in modules}
    for name, why in (failed or {}).items():
        rows[name] = Row(size, size * size, name, skipped=why, dtype=dtype, kind=method_kind(name))

    # Skip what would not fit or take too long, from estimates (once skipped, larger sizes are too).
    estimates: dict[str, tuple[float | None, float | None]] = {}
    for name in modules:
        row = rows[name]
        est_ms, est_mib = _extrapolate(prev, name, size, prev_size)
        if name == "dense-textbook":
            need = _textbook_bytes(size, args.heads, args.backward, element)
            if need > args.max_gib * GIB:
                over = f"(over --max-gib {args.max_gib:g})"
                row.skipped = f"out of memory: N x N scores need {_bytes(need)} {over}"
            est_mib = max(est_mib or 0.0, need / 2**20)
        estimates[name] = (est_ms, est_mib)
        if row.skipped:
            continue
        if est_mib is not None and est_mib * 2**20 > args.max_gib * GIB:
            row.skipped = f"skipped: est. {_bytes(est_mib * 2**20)} > {args.max_gib:g} GiB"
        elif est_ms is not None and est_ms / 1000 > args.max_seconds:
            row.skipped = f"skipped: est. {est_ms / 1000:.0f} s > {args.max_seconds:g} s"

    active = {name: m for name, m in modules.items() if rows[name].skipped is None}

    # Every method sharing an input projection sees the same q, k, v (the weights are shared):
    # computed once per projection shape (3C for q, k, v; C for the gating kinds' v alone).
    projected: dict[tuple, tuple] = {}

    def inputs(m: AttentionBranch, source: torch.Tensor) -> tuple:
        key = (tuple(m.qkv.weight.shape), source.dtype)
        if key not in projected:
            with torch.no_grad():
                projected[key] = m.project(source)
        return projected[key]

    def forward(m: AttentionBranch, aux: dict | None = None) -> Callable[[], object]:
        q, k, v = inputs(m, x)

        def call() -> object:
            with torch.inference_mode():
                return m.attend(q, k, v, x, aux)
        return call

    def forward_backward(m: AttentionBranch) -> Callable[[], object]:
        q, k, v = inputs(m, x32)

        def call() -> None:
            qq, kk, vv, xx = (None if t is None else t.detach().requires_grad_() for t in (q, k, v, x32))
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
                out = m.attend(qq, kk, vv, xx, None)
            out.float().square().mean().backward()
        return call

    for m in active.values():
        m.eval()
    # Warm-up + memory (one profiled call each), and the adaptive budget statistics.
    for name, m in list(active.items()):
        ok, peak = _attempt(rows[name], lambda m=m: peak_bytes(forward(m), device))
        if not ok:
            del active[name]
            continue
        rows[name].fwd_peak_mib = None if peak is None else peak / 2**20
        if isinstance(m, AdaptiveSparseAttention):
            aux: dict = {}
            forward(m, aux)()
            kmap = aux["budget_maps"][0]
            rows[name].extra = {"mean_k": round(float(kmap.mean()), 3), "regions": (size // 4) ** 2,
                                "gathered_regions": aux["gathered_regions"][0]}
    times: dict[str, list[float]] = {name: [] for name in active}
    for _ in range(args.repeat):
        for name, m in list(active.items()):
            ok, seconds = _attempt(rows[name], lambda m=m: clock(forward(m)))
            if ok:
                times[name].append(seconds)
            else:
                del active[name]
    for name in active:
        rows[name].fwd_ms = 1000 * min(times[name])

    if args.backward:
        trained = {name: train_modules[name] for name in active}
        for m in trained.values():
            m.train()
        for name, m in list(trained.items()):
            ok, peak = _attempt(rows[name], lambda m=m: peak_bytes(forward_backward(m), device))
            if not ok:
                del trained[name]
                continue
            rows[name].fwdbwd_peak_mib = None if peak is None else peak / 2**20
        btimes: dict[str, list[float]] = {name: [] for name in trained}
        for _ in range(args.repeat):
            for name, m in list(trained.items()):
                ok, seconds = _attempt(rows[name], lambda m=m: clock(forward_backward(m)))
                m.zero_grad(set_to_none=True)
                if ok:
                    btimes[name].append(seconds)
                else:
                    del trained[name]
        for name in trained:
            rows[name].fwdbwd_ms = 1000 * min(btimes[name])
        for m in train_modules.values():
            m.eval()

    # The projections the blocks share (not attention): input 1x1 conv, LePE, output projection; one
    # row per projection shape in the run (the gating kinds project v alone).
    groups: dict[int, AttentionBranch] = {}
    for m in modules.values():
        groups.setdefault(m.qkv.weight.shape[0], m)
    for width, m in groups.items():
        name = "projections" if width == 3 * c else "projections-v" if width == c else f"projections-{width}"

        def projections(m: AttentionBranch = m) -> object:
            with torch.inference_mode():
                _, _, v = m.project(x)
                return x + m.proj(v if m.lepe is None else m.lepe(v))
        projections()
        row = Row(size, size * size, name, dtype=dtype)
        row.fwd_ms = 1000 * min(clock(projections) for _ in range(args.repeat))
        rows[name] = row
    for name in active:  # measured figures replace the estimates (the backward ones are larger)
        r = rows[name]
        estimates[name] = (r.fwdbwd_ms or r.fwd_ms, r.fwdbwd_peak_mib or r.fwd_peak_mib)
    return rows, estimates


# --- report -------------------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _ratio(ref: float | None, value: float | None) -> float | None:
    return ref / value if ref and value else None


def _tokens(n: float) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:.0f}{unit}"
    return f"{n:.0f}"


def legend(methods: Sequence[str]) -> str:
    """Every registered kind, the methods it runs as here, and its expected cost."""
    lines = ["expected cost of each registered kind's core (N tokens, C channels, d = C / heads):"]
    for kind, own in kind_methods().items():
        ran = [m for m in own if m in methods]
        label = ", ".join(ran) if ran else "-" if not own else "(not in this run)"
        lines.append(f"  {kind:<12} {label:<27} {COMPLEXITY.get(kind, 'not stated')}")
    return "\n".join(lines)


def table(rows: list[Row], backward: bool) -> str:
    head = f"{'size':>9} {'tokens':>6} {'dtype':>5}  {'method':<16}{'fwd ms':>9} {'vs dense':>9}"
    head += f" {'peak MiB':>10} {'mem':>7}"
    if backward:
        head += f" {'fwd+bwd ms':>11} {'vs dense':>9} {'peak MiB':>10}"
    lines = [head, "-" * len(head)]
    groups: dict[tuple[str, int], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.dtype, r.size), []).append(r)
    for (dtype, size), group in groups.items():
        ref = next((r for r in group if r.method == REFERENCE), None)
        for r in group:
            line = f"{f'{size}x{size}':>9} {_tokens(r.tokens):>6} {dtype:>5}  {r.method:<16}"
            if r.skipped:
                lines.append(line + r.skipped)
                continue
            own = not r.method.startswith("projections")
            speed = _ratio(ref and ref.fwd_ms, r.fwd_ms) if own else None
            mem = (r.fwd_peak_mib / ref.fwd_peak_mib) if ref and ref.fwd_peak_mib and r.fwd_peak_mib else None
            line += f"{_fmt(r.fwd_ms):>9} {_fmt(speed, '.2f') + 'x' if speed else '-':>9} "
            line += f"{_fmt(r.fwd_peak_mib):>10} {_fmt(mem, '.2f') + 'x' if mem else '-':>7}"
            if backward and own:
                bspeed = _ratio(ref and ref.fwdbwd_ms, r.fwdbwd_ms)
                line += f" {_fmt(r.fwdbwd_ms):>11} {_fmt(bspeed, '.2f') + 'x' if bspeed else '-':>9}"
                line += f" {_fmt(r.fwdbwd_peak_mib):>10}"
            if r.extra:
                line += f"   mean k {r.extra['mean_k']:.2f}, {r.extra['gathered_regions']} regions gathered"
            lines.append(line)
    return "\n".join(lines)


def memory_notes(rows: list[Row]) -> list[str]:
    """One line per cell that could not be held in memory, with what dense-sdpa did at that size."""
    notes = []
    for r in rows:
        if not (r.skipped and r.skipped.startswith("out of memory")):
            continue
        ref = next((x for x in rows if (x.dtype, x.size, x.method) == (r.dtype, r.size, REFERENCE)), None)
        tail = ""
        if ref is not None and ref.fwd_ms:
            tail = (f"; dense-sdpa ran there ({ref.fwd_ms:.1f} ms, peak {_fmt(ref.fwd_peak_mib)} MiB): "
                    "its fused kernel never holds the N x N matrix")
        where = f"{r.method} at {r.size}x{r.size} ({_tokens(r.tokens)} tokens, {r.dtype})"
        notes.append(f"{where}: {r.skipped}{tail}")
    return notes


def _slope(rows: list[Row], method: str, key: str) -> float | None:
    """Log-log growth exponent of ``key`` with N between the smallest and largest measured sizes."""
    pts = [(r.tokens, getattr(r, key)) for r in rows if r.method == method and getattr(r, key)]
    if len(pts) < 2:
        return None
    (n0, y0), (n1, y1) = pts[0], pts[-1]
    return math.log(y1 / y0) / math.log(n1 / n0)


def crossing(rows: list[Row], method: str, reference: str = REFERENCE) -> dict | None:
    """Where ``method``'s forward time crosses ``reference``'s, from the sizes where both ran (one dtype).

    Returns None without a common size, else {"how", "tokens", "side", "between"}: "measured" (the last
    change from slower to faster, interpolated on log-log axes between the two sizes ``between``; it
    is faster at every larger size run), "below" (faster from the smallest size run), "extrapolated"
    (slower at every size run; where the time ratio's trend over the last two sizes reaches 1), "never"
    (slower at every size and not gaining on it) or "unknown" (slower at the one common size).
    """
    ref = {r.tokens: r.fwd_ms for r in rows if r.method == reference and r.fwd_ms}
    own = {r.tokens: r.fwd_ms for r in rows if r.method == method and r.fwd_ms}
    ns = sorted(set(ref) & set(own))
    if not ns:
        return None
    pts = [(math.log(n), math.log(own[n] / ref[n])) for n in ns]  # log ratio < 0: faster than dense
    slower = [i for i, (_, r) in enumerate(pts) if r >= 0]
    result: dict = {"how": "below", "tokens": None, "side": None, "between": None}
    if not slower:
        return result | {"between": [ns[0], ns[0]]}
    i = slower[-1]
    if i + 1 < len(pts):
        (a, ra), (b, rb) = pts[i], pts[i + 1]
        log_n, how, between = a + (0 - ra) * (b - a) / (rb - ra), "measured", [ns[i], ns[i + 1]]
    elif len(pts) < 2:
        return result | {"how": "unknown", "between": [ns[i], ns[i]]}
    else:
        (a, ra), (b, rb) = pts[-2], pts[-1]
        gain = (rb - ra) / (b - a)
        if gain >= 0:
            return result | {"how": "never", "between": [ns[-2], ns[-1]]}
        log_n, how, between = b - rb / gain, "extrapolated", [ns[-2], ns[-1]]
    tokens = math.exp(log_n)
    return {"how": how, "tokens": round(tokens), "side": round(math.sqrt(tokens), 1), "between": between}


def describe_crossing(cross: dict | None, reference: str = REFERENCE) -> str:
    if cross is None:
        return f"no size where both it and {reference} ran"
    sides = [f"{math.isqrt(n)}x{math.isqrt(n)}" for n in cross["between"]]
    side = cross["side"]
    at = f"~{side:.0f}x{side:.0f} ({_tokens(cross['tokens'])} tokens)" if side is not None else ""
    return {
        "measured": f"crosses at {at}, between {sides[0]} and {sides[1]}",
        "below": f"faster at every size run (from {sides[0]})",
        "extrapolated": f"slower at every size run; crosses at est. {at} (trend of {sides[0]}-{sides[1]})",
        "never": f"slower at every size run and not gaining ({sides[0]}-{sides[1]})",
        "unknown": f"slower at the one size run ({sides[0]})",
    }[cross["how"]]


def checks(rows: list[Row]) -> dict:
    """The figures the design promises, per dtype, computed from this run (absent where a method did
    not run)."""
    out: dict = {}
    for dtype in dict.fromkeys(r.dtype for r in rows):
        rs = [r for r in rows if r.dtype == dtype]
        methods = [m for m in dict.fromkeys(r.method for r in rs) if not m.startswith("projections")]
        get = {(r.size, r.method): r for r in rs}
        d: dict = {"speedup_vs_dense_sdpa": {}, "budget_halving_time_cut": {}}
        for size in sorted({r.size for r in rs}):
            ref, a4, a2 = (get.get((size, m)) for m in (REFERENCE, "adaptive-b4", "adaptive-b2"))
            if ref and a4 and ref.fwd_ms and a4.fwd_ms:
                d["speedup_vs_dense_sdpa"][size] = round(ref.fwd_ms / a4.fwd_ms, 2)
            if a4 and a2 and a4.fwd_ms and a2.fwd_ms:
                d["budget_halving_time_cut"][size] = round(1 - a2.fwd_ms / a4.fwd_ms, 3)
        d["peak_memory_growth_exponent"] = {
            m: round(s, 2) for m in methods if (s := _slope(rs, m, "fwd_peak_mib")) is not None
        }
        d["time_growth_exponent"] = {
            m: round(s, 2) for m in methods if (s := _slope(rs, m, "fwd_ms")) is not None
        }
        d["crossing_vs_dense_sdpa"] = {m: crossing(rs, m) for m in methods if m != REFERENCE}
        out[dtype] = d
    return out


def summary_text(summary: dict) -> str:
    lines = []
    for dtype, d in summary.items():
        lines.append(f"{dtype}: speed-up of adaptive-b4 vs dense-sdpa: {d['speedup_vs_dense_sdpa'] or '-'}")
        cut = d["budget_halving_time_cut"] or "-"
        lines.append(f"{dtype}: time cut from halving the budget (4 -> 2): {cut}")
        lines.append(f"{dtype}: growth with N (time ~ N^e, peak memory ~ N^e) and where each method's time "
                     "crosses dense-sdpa's:")
        for method, cross in d["crossing_vs_dense_sdpa"].items():
            te = d["time_growth_exponent"].get(method)
            me = d["peak_memory_growth_exponent"].get(method)
            lines.append(f"  {method:<15} time e {_fmt(te, '.2f'):>5}  memory e {_fmt(me, '.2f'):>5}  "
                         f"{describe_crossing(cross)}")
    return "\n".join(lines)


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
    known = method_names()
    methods = known if args.methods.strip() == "all" else comma_choices(args.methods, known, "method(s)")
    dtypes = comma_choices(args.dtypes, tuple(DTYPES), "dtype(s)")
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
    modules, failed = build_methods(methods, args.channels, args.heads, args.gate, args.seed)
    modules = {name: m.to(device) for name, m in modules.items()}
    if photo is not None:
        photo.share_weights(modules)

    inputs = f"photo features of {args.model}" if photo else "random features"
    print(f"attention core, batch 1, C={args.channels}, {args.heads} heads, stride 1, {inputs}, "
          f"channels-last, {' and '.join(dtypes)}; device {device}, {torch.get_num_threads()} threads, "
          f"{args.clock} clock, min of {args.repeat}", flush=True)
    print(legend(methods), flush=True)
    rows: list[Row] = []
    for dtype in dtypes:
        # bf16 as the engine runs it: a cast copy of each block (their fp32 originals run --backward)
        cast = modules if dtype == "fp32" else {
            name: copy.deepcopy(m).to(DTYPES[dtype]) for name, m in modules.items()
        }
        prev: dict[str, tuple[float | None, float | None]] = {}
        prev_size = None
        for size in sorted(set(args.sizes)):
            result, prev = run_size(size, cast, args, device, clock, prev, prev_size, photo, dtype,
                                    train_modules=modules, failed=failed)
            rows.extend(result.values())
            prev_size = size
            print(f"  {dtype} {size}x{size} done", flush=True)
    print(table(rows, args.backward))
    for note in memory_notes(rows):
        print(note)
    summary = checks(rows)
    print(summary_text(summary))
    if args.json:
        write_json(args.json, {
            "config": run_config(args, device),
            "complexity": {kind: COMPLEXITY.get(kind, "not stated") for kind in attention_kinds()},
            "rows": [asdict(r) for r in rows],
            "checks": summary,
        })
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.attention [options]``: the same benchmark as ``sr bench attention``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.attention",
                                     description="time and peak memory of every attention kind vs dense")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except CLIError as e:
        parser.exit(e.code, f"{parser.prog}: error: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
