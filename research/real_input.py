"""``python -m research.peers --real-input``: public real-input x4 models beside ours, on degraded input.

The contenders at x4: bicubic, asa-base, photo (the project's shipped networks, as the engine runs
them), light SAFMN++ (:mod:`research.safmn`) and Real-ESRGAN general-x4v3 (:mod:`research.srvgg`),
alone and blended 0.5 with its weak-denoise twin (Real-ESRGAN's default denoise strength). The
public weights come from ``--peers-dir`` (``../shared/peers``: sources and licences in its README)
and load strictly.

Quality: every contender scores the clean set (``--hr``, bicubic LR) and the seeded degraded sets of
``--levels`` (built into, or reused from, ``--degrade-dir`` exactly as ``sr degrade`` / ``sr eval
--degrade`` build them), with the evaluation protocol of :mod:`sr.evaluation` (Y channel, scale-wide
border cropped; the same functions ``sr eval`` calls). The blind mean is the mean of the mild /
medium / heavy set means, as ``sr eval`` reports it.

Speed: the networks take turns image by image on the clean LR of ``--hr`` (the first ``--images``;
channels-last, fp32); each image counts its fastest of ``--rounds``, in CPU seconds of this process
(one thread: the compute a forward pass costs, not the turns of other jobs on a shared machine);
CPU seconds per output megapixel. The 0.5 blend is the
general network with other weights: same speed, timed once. Ratios to photo are the figure to quote.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmarks.tooling import set_threads, write_json
from sr.errors import CLIError

SCALE = 4
REPO = Path(__file__).resolve().parents[1]
DEFAULT_PEERS = REPO.parent / "shared" / "peers"
DEFAULT_VALID = REPO.parent / "shared" / "datasets" / "valid"
BLIND = ("mild", "medium", "heavy")
SAFMN_FILE = "light_safmnpp.pth"
GENERAL_FILE = "realesr-general-x4v3.pth"
WDN_FILE = "realesr-general-wdn-x4v3.pth"


@dataclass
class Contender:
    name: str
    net: nn.Module | None          # None: bicubic
    gan: bool = False
    timed: bool = True             # False: same network as one already timed
    params: int = 0
    macs_g: float = 0.0            # for a 1280x720 output


@dataclass
class LevelScores:
    level: str
    set: str
    images: list[str]
    psnr: dict[str, list[float]] = field(default_factory=dict)   # contender -> per image
    ssim: dict[str, list[float]] = field(default_factory=dict)


def contenders(peers_dir: Path, ours: list[str], strength: float) -> list[Contender]:
    """bicubic, our models, SAFMN++, Real-ESRGAN general and its blend; peers loaded strictly."""
    from sr.models import count_macs, count_params

    from ._networks import our_networks
    from .safmn import load_light_safmnpp
    from .srvgg import blend_states, load_srvgg, read_state

    if not 0.0 <= strength <= 1.0:  # the argument first: its error does not depend on the files
        raise CLIError(f"--denoise-strength must be within 0..1, got {strength}")
    files = {f: peers_dir / f for f in (SAFMN_FILE, GENERAL_FILE, WDN_FILE)}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise CLIError(f"--peers-dir: missing {', '.join(missing)}")
    try:
        general = read_state(files[GENERAL_FILE])
        peers = [
            Contender("SAFMN++ light", load_light_safmnpp(files[SAFMN_FILE])),
            Contender("R-ESRGAN general", load_srvgg(general), gan=True),
            Contender(f"R-ESRGAN blend {strength:g}",
                      load_srvgg(blend_states(general, read_state(files[WDN_FILE]), strength)),
                      gan=True, timed=False),
        ]
    except (RuntimeError, ValueError, OSError) as e:  # strict loading: a key or a shape that differs
        raise CLIError(f"--peers-dir {peers_dir}: {str(e).splitlines()[0]}") from None
    out = [Contender("bicubic", None, timed=False)]
    for name in ours:
        _, nets = our_networks(name, [SCALE])
        label, net = nets[SCALE]
        out.append(Contender(label.removesuffix(f"-x{SCALE}"), net))
    out += peers
    for c in out:
        if c.net is not None:
            c.params, c.macs_g = count_params(c.net), count_macs(c.net) / 1e9
    return out


def _sets(hr: str, levels: list[str], degrade_dir: Path, seed: int) -> list[tuple[str, object]]:
    """(level, SetPlan) for clean and each degraded level; degraded sets built once, then reused."""
    from sr.evaluation import build_targets, plan_degraded, plan_sets

    out = [("clean", plan_sets([hr], None, SCALE)[0])]
    if levels:
        targets = plan_degraded([hr], levels, SCALE, degrade_dir, seed)
        build_targets(targets, SCALE, seed)
        plans = plan_sets([str(t.hr_dir) for t in targets], [str(t.out) for t in targets], SCALE)
        for plan, t in zip(plans, targets, strict=True):
            plan.name = t.out.name
            out.append((t.level, plan))
    return out


def score(sets: list[tuple[str, object]], models: list[Contender], log=print) -> list[LevelScores]:
    """Every contender on every set, with the project's protocol (sr.evaluation.score_pairs)."""
    from sr.evaluation import model_upscaler, score_pairs

    results = []
    for level, plan in sets:
        res = LevelScores(level, plan.name, [h.stem for h, _ in plan.pairs])
        for c in models:
            t0 = time.perf_counter()
            upscale = None if c.net is None else model_upscaler(c.net)
            rows = [(p, s) for _, _, p, s, _ in score_pairs(plan, upscale, SCALE)]
            res.psnr[c.name] = [p for p, _ in rows]
            res.ssim[c.name] = [s for _, s in rows]
            log(f"  {level:<6} {c.name:<20} {np.mean(res.psnr[c.name]):.4f} / "
                f"{np.mean(res.ssim[c.name]):.4f}  ({time.perf_counter() - t0:.0f} s)")
        results.append(res)
    return results


def blind_mean(results: list[LevelScores], name: str, metric: str) -> float | None:
    """The mean of the mild / medium / heavy set means (None unless all three were scored)."""
    means = [float(np.mean(getattr(r, metric)[name])) for r in results if r.level in BLIND]
    return float(np.mean(means)) if len(means) == len(BLIND) else None


def _time_interleaved(nets: list[nn.Module], inputs: list[torch.Tensor], rounds: int) -> list[list[float]]:
    """Per network, per image, the fastest of ``rounds`` CPU seconds; the networks take turns on
    each image. CPU time of this process, not wall time: with one thread it is the compute the
    forward pass costs, and on a machine shared with other jobs it does not count their turns."""
    best = [[float("inf")] * len(inputs) for _ in nets]
    with torch.inference_mode():
        for i, x in enumerate(inputs):
            for _ in range(rounds):
                for m, net in enumerate(nets):
                    t = time.process_time()
                    net(x)
                    best[m][i] = min(best[m][i], time.process_time() - t)
    return best


def speed(models: list[Contender], hr: str, images: int, rounds: int) -> dict[str, float]:
    """CPU seconds per output MP of each timed network, side by side on the clean LR of ``hr``."""
    from .ablation import lr_inputs

    timed = [c for c in models if c.net is not None and c.timed]
    nets = [c.net.to(memory_format=torch.channels_last) for c in timed]
    inputs = [x.contiguous(memory_format=torch.channels_last) for x in lr_inputs(hr, SCALE, images)]
    with torch.inference_mode():
        for net in nets:
            net(inputs[0])  # warm-up: first calls allocate
    best = _time_interleaved(nets, inputs, rounds)
    mp = sum(x.shape[-2] * x.shape[-1] * SCALE * SCALE for x in inputs) / 1e6
    return {c.name: sum(times) / mp for c, times in zip(timed, best, strict=True)}


def quality_table(results: list[LevelScores], models: list[Contender]) -> str:
    names = [c.name + (" (GAN)" if c.gan else "") for c in models]
    lines = ["| level | " + " | ".join(names) + " |", "|---|" + "---|" * len(models)]
    levels = [(r.level, r) for r in results]
    if blind_mean(results, models[0].name, "psnr") is not None:
        levels.append(("blind mean", None))
    for level, r in levels:
        cells = []
        for c in models:
            if r is None:
                p, s = blind_mean(results, c.name, "psnr"), blind_mean(results, c.name, "ssim")
            else:
                p, s = float(np.mean(r.psnr[c.name])), float(np.mean(r.ssim[c.name]))
            cells.append(f"{p:.2f} / {s:.4f}")
        best = max(range(len(models)), key=lambda i: float(cells[i].split(" / ")[0]))
        cells[best] = f"**{cells[best]}**"
        lines.append(f"| {level} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speed_table(models: list[Contender], s_per_mp: dict[str, float], reference: str | None) -> str:
    lines = ["| model | params | GMACs (1280x720 out) | CPU s per output MP | vs " + (reference or "-")
             + " |",
             "|---|---:|---:|---:|---:|"]
    for c in models:
        if c.net is None:
            continue
        timed_as = c.name if c.name in s_per_mp else next(
            (o.name for o in models if o.gan and o.name in s_per_mp), None)
        s = s_per_mp.get(timed_as) if timed_as else None
        ratio = f"{s / s_per_mp[reference]:.2f}x" if s and reference in s_per_mp else "-"
        note = "" if c.name in s_per_mp else " (same network as R-ESRGAN general)"
        lines.append(f"| {c.name}{' (GAN)' if c.gan else ''}{note} | {c.params:,} | {c.macs_g:.1f} | "
                     f"{'-' if s is None else f'{s:.3f}'} | {ratio} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from sr.evaluation import EvaluationError, parse_levels
    from sr.evaluation.degraded import DEFAULT_SEED

    if args.rounds < 1 or (args.images is not None and args.images < 1):
        raise CLIError("--images and --rounds must be >= 1")
    set_threads(args.threads)
    hr = args.hr or str(DEFAULT_VALID)
    if not Path(hr).is_dir():
        raise CLIError(f"--hr {hr}: no such folder")
    try:
        levels = [] if args.levels == "none" else parse_levels(args.levels, "--levels")
        models = contenders(Path(args.peers_dir), ["asa-base-x4", "photo-x4"], args.denoise_strength)
        sets = _sets(hr, levels, Path(args.degrade_dir), DEFAULT_SEED)
    except EvaluationError as e:
        raise CLIError(str(e)) from None
    print(f"{torch.get_num_threads()} CPU thread(s); x{SCALE} on {hr}: clean + {', '.join(levels) or 'no'}"
          " degraded levels", flush=True)
    # speed first: it is short, and the quality pass writes its JSON level by level
    s_per_mp = speed(models, hr, args.images if args.images is not None else 10**9, args.rounds)
    reference = "photo" if "photo" in s_per_mp else None
    speed_note = (f"speed: clean LR of {hr} (first {args.images or 'all'} images), fastest of {args.rounds} "
                  "interleaved rounds per image, CPU seconds per output MP")
    print(f"{speed_note}\n{speed_table(models, s_per_mp, reference)}\n", flush=True)
    results: list[LevelScores] = []

    def report(complete: bool) -> None:
        if args.json:
            write_json(args.json, {
                "complete": complete, "threads": torch.get_num_threads(), "hr": hr, "scale": SCALE,
                "rounds": args.rounds, "speed_images": args.images, "degrade_dir": args.degrade_dir,
                "seed": DEFAULT_SEED,
                "models": [{"name": c.name, "gan": c.gan, "params": c.params, "macs_g": c.macs_g,
                            "cpu_s_per_mp": s_per_mp.get(c.name)} for c in models],
                "levels": [asdict(r) for r in results],
                "blind_mean": {c.name: {"psnr": blind_mean(results, c.name, "psnr"),
                                        "ssim": blind_mean(results, c.name, "ssim")} for c in models},
            })

    for one in sets:  # one level at a time, the JSON rewritten after each: a cut run keeps its levels
        results += score([one], models, log=lambda line: print(line, flush=True))
        report(complete=False)
    report(complete=True)
    print("\nY-PSNR / SSIM (GAN: trained for crispness, not fidelity)")
    print(quality_table(results, models))
    print(f"\n{speed_note}\n{speed_table(models, s_per_mp, reference)}")
    return 0
