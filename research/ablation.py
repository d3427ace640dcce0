"""``python -m research.ablation RUN_DIR...``: one table for training runs compared at equal compute.

Per run: its network (attention kind, parameters, MACs for a 1280x720 output and per output pixel,
the forward's CPU time on one ``--forward-size`` square LR tile, fp32), its training
(steps, CPU hours from the checkpoint's ``cpu_elapsed``, CPU seconds per step), its ``best.pt``
(chosen by the run's ``--best-on``, on valid/ for the ablations) with the validation PSNR / SSIM
that the trainer recorded for it (the protocol of ``sr eval``: Y channel, border = scale), and the
inference speed of its network: whole images (the LR of ``--hr``'s first ``--images`` images),
one forward each, the runs taking turns image by image so that load from other processes hits
them alike; output MP/s is total output pixels over the summed fastest-of-``--rounds`` times.
The forward time is this process's CPU time (steady on a shared machine with one thread), the
median of ``--rounds`` interleaved rounds on one random tile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from benchmarks.tooling import set_threads, write_json
from sr.errors import CLIError

from ._script import run_script


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="training run folders (with best.pt, last.pt)")
    p.add_argument("--hr", help="folder of HR images whose LR versions time the inference (default: none)")
    p.add_argument("--images", type=int, default=4, help="images of --hr to time (default 4)")
    p.add_argument("--rounds", type=int, default=2, help="timed passes per image and run (default 2)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--kinds", default="", metavar="K1,K2",
                   help="also untrained networks of the runs' preset and scale with these attention kinds, "
                        "for the cost columns only (arms whose runs are gone)")
    p.add_argument("--forward-size", type=int, default=0, metavar="N",
                   help="also time one forward on an N x N LR tile, fp32, CPU time (default 0: off)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


@dataclass
class RunRow:
    run: str
    attention: str
    params: int
    macs_g: float
    steps: int
    cpu_hours: float
    cpu_s_per_step: float
    best_step: int
    results: dict = field(default_factory=dict)  # set -> {"psnr", "ssim"} of best.pt
    mp_s: float | None = None
    forward_ms: float | None = None

    @property
    def macs_per_px(self) -> float:
        return self.macs_g * 1e9 / (1280 * 720)


def _load_run(run_dir: Path):
    from sr.models import SRNet, count_macs, count_params
    from sr.models.registry import build_config

    for name in ("config.json", "best.pt", "last.pt"):
        if not (run_dir / name).is_file():
            raise CLIError(f"{run_dir}: no {name} (not a finished or paused training run)")
    cfg = json.loads((run_dir / "config.json").read_text())
    overrides = {"attention": cfg["attention"]} if cfg.get("attention") else {}
    model = SRNet(build_config(cfg["preset"], cfg["scale"], **overrides))
    best = torch.load(run_dir / "best.pt", map_location="cpu", weights_only=False)
    last = torch.load(run_dir / "last.pt", map_location="cpu", weights_only=False)
    model.load_state_dict(best["ema"])
    model.eval()
    cpu = float(last.get("cpu_elapsed", 0.0))
    row = RunRow(
        run=run_dir.name, attention=model.cfg.attention, params=count_params(model),
        macs_g=count_macs(model) / 1e9, steps=int(last["step"]), cpu_hours=cpu / 3600,
        cpu_s_per_step=cpu / max(1, int(last["step"])), best_step=int(best["step"]),
        results=best.get("best", {}).get("results", {}),
    )
    return row, model


def _untrained(kind: str, preset: str, scale: int):
    from sr.models import SRNet, count_macs, count_params
    from sr.models.attention import attention_kinds
    from sr.models.registry import build_config

    if kind not in attention_kinds():
        raise CLIError(f"--kinds: unknown attention kind {kind!r} (known: {', '.join(attention_kinds())})")
    model = SRNet(build_config(preset, scale, attention=kind)).eval()
    row = RunRow(run=f"{kind} (untrained)", attention=kind, params=count_params(model),
                 macs_g=count_macs(model) / 1e9, steps=0, cpu_hours=0.0, cpu_s_per_step=0.0, best_step=0)
    return row, model


def lr_inputs(folder: str, scale: int, n: int) -> list[torch.Tensor]:
    from sr.evaluation import list_images, load_rgb_pair

    out = []
    for path in list_images(folder)[:n]:
        lr = load_rgb_pair(path, scale)[1]
        out.append(torch.tensor(lr).permute(2, 0, 1)[None].float().div(255))
    if not out:
        raise CLIError(f"--hr {folder}: no images")
    return out


def time_side_by_side(models: list[torch.nn.Module], inputs: list[torch.Tensor], rounds: int,
                       scale: int) -> list[float]:
    """Output MP/s per model; models take turns on each image, fastest of ``rounds`` counts."""
    best = [[float("inf")] * len(inputs) for _ in models]
    with torch.inference_mode():
        for i, x in enumerate(inputs):
            for _ in range(rounds):
                for m, model in enumerate(models):
                    t = time.perf_counter()
                    model(x)
                    best[m][i] = min(best[m][i], time.perf_counter() - t)
    pixels = sum(x.shape[-2] * x.shape[-1] * scale * scale for x in inputs)
    return [pixels / 1e6 / sum(times) for times in best]


def forward_cpu_ms(models: list[torch.nn.Module], size: int, rounds: int) -> list[float]:
    """Each model's median forward CPU time (ms) on one random ``size`` x ``size`` tile, the models
    taking turns round by round after one untimed warm-up forward each."""
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    times: list[list[float]] = [[] for _ in models]
    with torch.inference_mode():
        for model in models:
            model(x)
        for _ in range(rounds):
            for m, model in enumerate(models):
                t = time.process_time()
                model(x)
                times[m].append((time.process_time() - t) * 1e3)
    return [statistics.median(t) for t in times]


def table(rows: list[RunRow]) -> str:
    sets = list(dict.fromkeys(s for r in rows for s in r.results))
    timed = any(r.forward_ms is not None for r in rows)
    head = ["run", "attention", "params", "GMACs", "MACs/px", "steps", "CPU h", "CPU s/step", "best step",
            *[f"{s} PSNR / SSIM" for s in sets], "MP/s", *(["forward ms"] if timed else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        scores = [f"{r.results[s]['psnr']:.4f} / {r.results[s]['ssim']:.4f}" if s in r.results else "-"
                  for s in sets]
        mp = "-" if r.mp_s is None else f"{r.mp_s:.3f}"
        fwd = ([] if not timed else ["-" if r.forward_ms is None else f"{r.forward_ms:.0f}"])
        trained = ([str(r.steps), f"{r.cpu_hours:.2f}", f"{r.cpu_s_per_step:.2f}", str(r.best_step)]
                   if r.steps else ["-"] * 4)
        lines.append("| " + " | ".join([r.run, r.attention, f"{r.params:,}", f"{r.macs_g:.1f}",
                                        f"{r.macs_per_px:,.0f}", *trained, *scores, mp, *fwd]) + " |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.images < 1 or args.rounds < 1:
        raise CLIError("--images and --rounds must be >= 1")
    if args.forward_size < 0:
        raise CLIError("--forward-size must be >= 0 (0: no forward timing)")
    set_threads(args.threads)
    loaded = [_load_run(Path(d)) for d in args.runs]
    preset = json.loads((Path(args.runs[0]) / "config.json").read_text())["preset"]
    loaded += [_untrained(k, preset, loaded[0][1].scale) for k in filter(None, args.kinds.split(","))]
    rows, models = [r for r, _ in loaded], [m for _, m in loaded]
    scales = {m.scale for m in models}
    if len(scales) > 1:
        raise CLIError(f"the runs mix scales {sorted(scales)}: compare runs of one scale")
    if args.hr:
        if not Path(args.hr).is_dir():
            raise CLIError(f"--hr {args.hr}: no such folder")
        speeds = time_side_by_side(models, lr_inputs(args.hr, scales.pop(), args.images), args.rounds,
                                    models[0].scale)
        for r, s in zip(rows, speeds, strict=True):
            r.mp_s = s
    if args.forward_size:
        for r, ms in zip(rows, forward_cpu_ms(models, args.forward_size, args.rounds), strict=True):
            r.forward_ms = ms
    print(table(rows))
    if args.json:
        write_json(args.json, {"threads": torch.get_num_threads(), "hr": args.hr, "images": args.images,
                               "forward_size": args.forward_size,
                               "runs": [{**asdict(r), "macs_per_px": r.macs_per_px} for r in rows]})
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, prog="python -m research.ablation")


if __name__ == "__main__":
    sys.exit(main())
