"""``sr bench train``: training-step time per preset and per attention kind.

One step is the trainer's own :meth:`~sr.train.learner.Learner.train_step`, minus data loading: forward
(collecting the budget loss), L1 + 0.01 * budget loss, backward, gradient clipping, AdamW step, EMA
update. Inputs are a fixed random batch (LR patches and their HR targets). The configurations run
interleaved, one step each in turn, so that load from other processes hits all of them alike; the
reported step time is the median over ``--steps`` steps after ``--warmup`` untimed ones. ``x none``
is the step time relative to the same preset with attention ``none`` (the conv-only network) in the
same memory layout, which every preset is also run with. The trainer runs channels-last;
``--layouts channels-last,contiguous`` times both. ``--profile N`` then runs two more steps of each
configuration under ``torch.profiler`` and lists its N costliest operators (self CPU time per step,
calls per step): where a configuration's extra time goes.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from sr.errors import CLIError
from sr.models import DEFAULT_PRESET, PRESETS, count_params
from sr.models.attention import ATTENTION_KINDS
from sr.train.config import TrainConfig
from sr.train.learner import Learner

from .attention import Clock, add_timing_arguments, pick_device, run_config
from .tooling import set_threads, write_json

BUDGET_WEIGHT = TrainConfig.budget_weight  # the trainer's default
TARGET_RATIO = 1.5  # the default preset's step may cost at most this much more than without attention
LAYOUTS = {"channels-last": torch.channels_last, "contiguous": torch.contiguous_format}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--presets", default=",".join(PRESETS),
                   help=f"comma-separated presets (default: {','.join(PRESETS)})")
    p.add_argument("--kinds", default="none,window,topk,adaptive",
                   help=f"attention kinds to compare on {DEFAULT_PRESET} (default: %(default)s)")
    p.add_argument("--scale", type=int, default=2, choices=(2, 3, 4), help="upscaling factor (default 2)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per configuration (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--batch", type=int, default=16, help="batch size (default 16)")
    p.add_argument("--patch", type=int, default=48, help="LR patch side (default 48)")
    p.add_argument("--amp", action="store_true", help="bf16 autocast (default: fp32)")
    p.add_argument("--layouts", default="channels-last",
                   help=f"comma-separated memory layouts of model and batch, from {', '.join(LAYOUTS)} "
                        "(default: %(default)s, the trainer's)")
    add_timing_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="seed for weights and the batch (default 0)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also list each configuration's N costliest operators per step (default 0: off)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


@dataclass
class Result:
    preset: str
    attention: str
    params: int
    step_ms: float
    it_s: float
    layout: str = "channels-last"
    ratio_to_none: float | None = None


def configurations(presets: list[str], kinds: list[str]) -> list[tuple[str, str]]:
    """(preset, attention) pairs: each preset with its own attention and with none; the default
    preset also with every kind in ``kinds``."""
    out: list[tuple[str, str]] = []
    for preset in presets:
        wanted = [PRESETS[preset]["attention"], "none"]
        if preset == DEFAULT_PRESET:
            wanted = ["none", *kinds, PRESETS[preset]["attention"]]
        for kind in wanted:
            if (preset, kind) not in out:
                out.append((preset, kind))
    return out


class Step:
    """A trainer (model, EMA, optimiser) doing its own training step on a fixed batch."""

    def __init__(
        self, preset: str, kind: str, layout: str, args: argparse.Namespace, device: torch.device
    ) -> None:
        self.layout = LAYOUTS[layout]
        cfg = TrainConfig(preset=preset, scale=args.scale, attention=kind, lr=1e-4, loss="l1",
                          budget_weight=BUDGET_WEIGHT, grad_clip=1.0, amp="bf16" if args.amp else "off",
                          seed=args.seed)
        self.trainer = Learner(cfg, device, memory_format=self.layout)
        self.model = self.trainer.model.train()

    def __call__(self, lr: torch.Tensor, hr: torch.Tensor) -> float:
        pixel, _ = self.trainer.train_step(lr.contiguous(memory_format=self.layout), hr)
        return pixel.item()  # a host read per step, as a timed step must end with its work done


PROFILED_STEPS = 2


def profile_ops(step: Callable[[], object], top: int) -> list[dict]:
    """The ``top`` operators by self CPU time over ``PROFILED_STEPS`` calls of ``step``, per call
    (also ``sr bench upscale --profile``'s table)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(PROFILED_STEPS):
            step()
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    return [{"op": e.key, "self_ms": e.self_cpu_time_total / 1000 / PROFILED_STEPS,
             "calls": e.count / PROFILED_STEPS} for e in ops[:top]]


def print_profile(title: str, ops: list[dict], per: str = "step") -> None:
    """:func:`profile_ops`'s rows as a table under ``title``."""
    print(f"\n{title}: top {len(ops)} operators, self CPU ms per {per} (calls per {per})")
    for o in ops:
        print(f"  {o['op']:<40}{o['self_ms']:>9.1f}  ({o['calls']:g})")


def _names(text: str, known, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise CLIError(f"unknown {what} {', '.join(unknown) or '(none)'}; choose from {', '.join(known)}")
    return names


def table(results: list[Result]) -> str:
    head = (f"{'preset':<12}{'attention':<11}{'layout':<15}{'params':>9}{'step ms':>10}{'it/s':>8}"
            f"{'x none':>8}")
    lines = [head, "-" * len(head)]
    for r in results:
        ratio = "-" if r.ratio_to_none is None else f"{r.ratio_to_none:.2f}x"
        lines.append(f"{r.preset:<12}{r.attention:<11}{r.layout:<15}{r.params:>9,}{r.step_ms:>10.0f}"
                     f"{r.it_s:>8.2f}{ratio:>8}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    presets = _names(args.presets, list(PRESETS), "preset(s)")
    kinds = _names(args.kinds, list(ATTENTION_KINDS), "attention kind(s)")
    layouts = _names(args.layouts, list(LAYOUTS), "layout(s)")
    limits = (("--steps", args.steps, 1), ("--warmup", args.warmup, 0), ("--batch", args.batch, 1),
              ("--patch", args.patch, 4), ("--profile", args.profile, 0))
    for name, value, low in limits:
        if value < low:
            raise CLIError(f"{name} must be >= {low}, got {value}")
    if args.json and not Path(args.json).parent.is_dir():
        raise CLIError(f"--json {args.json}: folder {Path(args.json).parent} does not exist")
    set_threads(args.threads)
    device = pick_device(args.device)
    clock = Clock(args.clock, device)

    g = torch.Generator().manual_seed(args.seed)
    s, n = args.scale, args.batch
    hr = torch.rand(n, 3, args.patch * s, args.patch * s, generator=g)
    lr = F.avg_pool2d(hr, s)  # a plausible LR/HR pair; content does not change the cost
    lr, hr = lr.to(device), hr.to(device)
    configs = [(*cfg, layout) for layout in layouts for cfg in configurations(presets, kinds)]
    steps = {cfg: Step(*cfg, args, device) for cfg in configs}

    precision = "bf16 autocast" if args.amp else "fp32"
    print(f"training step, batch {n}, LR patch {args.patch}, x{s}, {precision}; "
          f"device {device}, {torch.get_num_threads()} threads, {args.clock} clock, "
          f"median of {args.steps} after {args.warmup} warm-up", flush=True)
    times: dict[tuple[str, str], list[float]] = {cfg: [] for cfg in configs}
    for i in range(args.warmup + args.steps):
        for cfg, step in steps.items():
            seconds = clock(lambda step=step: step(lr, hr))
            if i >= args.warmup:
                times[cfg].append(seconds)
        print(f"  step {i + 1}/{args.warmup + args.steps}", flush=True)

    results = []
    for cfg in configs:
        ms = 1000 * statistics.median(times[cfg])
        results.append(Result(cfg[0], cfg[1], count_params(steps[cfg].model), ms, 1000 / ms, cfg[2]))
    base = {(r.preset, r.layout): r.step_ms for r in results if r.attention == "none"}
    for r in results:
        key = (r.preset, r.layout)
        r.ratio_to_none = r.step_ms / base[key] if key in base else None
    print(table(results))
    for target in results:
        if (target.preset, target.attention) != (DEFAULT_PRESET, PRESETS[DEFAULT_PRESET]["attention"]):
            continue
        if target.ratio_to_none is not None:
            verdict = "meets" if target.ratio_to_none <= TARGET_RATIO else "misses"
            print(f"{DEFAULT_PRESET} step ({target.layout}) = {target.ratio_to_none:.2f}x the same network "
                  f"without attention ({verdict} the <= {TARGET_RATIO}x target)")
    if len(layouts) > 1:
        first = {(r.preset, r.attention): r.step_ms for r in results if r.layout == layouts[0]}
        for r in results:
            if r.layout != layouts[0]:
                print(f"{r.preset} {r.attention}: {r.layout} step = "
                      f"{r.step_ms / first[(r.preset, r.attention)]:.2f}x {layouts[0]}'s")
    profiles = {}
    for cfg in configs if args.profile else []:
        profiles["/".join(cfg)] = ops = profile_ops(lambda cfg=cfg: steps[cfg](lr, hr), args.profile)
        print_profile(" / ".join(cfg), ops)
    if args.json:
        payload = {"config": run_config(args, device), "results": [asdict(r) for r in results]}
        write_json(args.json, {**payload, "profile": profiles} if profiles else payload)
    return 0
