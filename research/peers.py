"""``python -m research.peers``: our model's CPU speed against IMDN's published architecture, in one run.

Per scale, the LR versions of ``--hr``'s images (MATLAB bicubic, modcrop to the scale) go whole
through both networks: ours as ``sr upscale`` runs it (the file's network, eval mode, the attention
path that the engine picks on this device), and IMDN (``research.imdn``, random weights: speed
does not depend on them). The two take turns image by image, so that load from other processes hits
them alike; each image's time is the fastest of ``--rounds``, and output MP/s is total output pixels
over the summed times. The ratio (ours / IMDN) is the figure to quote; lone MP/s vary with the
machine's load. Parameters and MACs (1280x720 output) are printed beside the speeds.
``--precision bf16`` runs both networks in bf16 (default fp32).

``--real-input`` compares instead, at x4 on degraded input, public real-input models (light SAFMN++,
Real-ESRGAN general-x4v3) with bicubic, asa-base and photo: quality per degradation level and speed
on the same CPU (:mod:`research.real_input`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from benchmarks.tooling import set_threads, write_json
from sr import DEFAULT_MODEL
from sr.commands.precision import add_precision_argument
from sr.errors import CLIError

from ._networks import our_networks
from ._script import run_script
from .ablation import lr_inputs, time_side_by_side

REPO = Path(__file__).resolve().parents[1]
DEFAULT_HR = REPO.parent / "shared" / "datasets" / "benchmark" / "Set14"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME_OR_PATH",
                   help=f"shipped family or name, or a .safetensors file (default: {DEFAULT_MODEL}, every"
                   " scale)")
    p.add_argument("--scales", default="2,3,4",
                   help="scales to compare, of those the model has (default 2,3,4)")
    p.add_argument("--hr", default=None,
                   help="folder of HR images (default: Set14; with --real-input: valid)")
    p.add_argument("--images", type=int, default=None, help="use only the first N images (default: all)")
    p.add_argument("--rounds", type=int, default=2, help="timed passes per image and network (default 2)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1; 0 = torch's default)")
    add_precision_argument(p, default="fp32", note=" (both networks run in it; auto: what the engine "
                                                   "picks for each of our scales)")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    g = p.add_argument_group("real input (x4: public real-input models on degraded sets)")
    g.add_argument("--real-input", action="store_true",
                   help="compare light SAFMN++ and Real-ESRGAN general-x4v3 with bicubic, asa-base and photo "
                        "at x4: PSNR/SSIM per degradation level, seconds per MP "
                        "(--model/--scales/--precision do not apply)")
    g.add_argument("--peers-dir", default=str(REPO.parent / "shared" / "peers"),
                   help="folder of the public weights (default: ../shared/peers)")
    g.add_argument("--levels", default="all",
                   help="degraded levels besides clean: web, mild, medium, heavy, a comma list, all or none "
                        "(default all)")
    g.add_argument("--degrade-dir", default="runs/degraded",
                   help="where the degraded sets are built once and reused, as `sr degrade -o` "
                        "(default runs/degraded)")
    g.add_argument("--denoise-strength", type=float, default=0.5,
                   help="Real-ESRGAN's blend of general and its weak-denoise twin (default 0.5, its own)")


@dataclass
class PeerRow:
    scale: int
    ours: str
    ours_params: int
    imdn_params: int
    ours_macs_g: float
    imdn_macs_g: float
    images: int
    ours_mp_s: float
    imdn_mp_s: float

    @property
    def ratio(self) -> float:
        return self.ours_mp_s / self.imdn_mp_s


def _parse_scales(text: str) -> list[int]:
    try:
        scales = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise CLIError(f"--scales must be comma-separated integers, got {text!r}") from None
    if not scales or any(s not in (2, 3, 4) for s in scales):
        raise CLIError(f"--scales must name scales among 2, 3, 4, got {text!r}")
    return list(dict.fromkeys(scales))


def table(rows: list[PeerRow]) -> str:
    lines = ["| scale | ours | params ours / IMDN | GMACs ours / IMDN | images | MP/s ours | MP/s IMDN "
             "| ours / IMDN |", "|---|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| x{r.scale} | {r.ours} | {r.ours_params:,} / {r.imdn_params:,} | "
                     f"{r.ours_macs_g:.1f} / {r.imdn_macs_g:.1f} | {r.images} | {r.ours_mp_s:.3f} | "
                     f"{r.imdn_mp_s:.3f} | {r.ratio:.2f}x |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from sr.inference.precision import precision_name
    from sr.models import count_macs, count_params

    from .imdn import IMDN

    if args.real_input:
        from .real_input import run as run_real_input

        return run_real_input(args)
    if args.hr is None:
        args.hr = str(DEFAULT_HR)
    if (args.images is not None and args.images < 1) or args.rounds < 1:
        raise CLIError("--images and --rounds must be >= 1")
    set_threads(args.threads)
    scales = _parse_scales(args.scales)
    if not Path(args.hr).is_dir():
        raise CLIError(f"--hr {args.hr}: no such folder")
    engine, ours = our_networks(args.model, scales, args.precision)
    rows = []
    for s, (name, net) in ours.items():
        # both networks in the engine's memory format (channels-last on CPU: oneDNN's native layout)
        # and in the dtype the engine runs ours in
        dtype = engine.dtype_for(s)
        imdn = IMDN(s).eval().to(dtype=dtype, memory_format=engine.memory_format)
        inputs = [x.to(dtype=dtype, memory_format=engine.memory_format)
                  for x in lr_inputs(args.hr, s, args.images if args.images is not None else 10**9)]
        with torch.inference_mode():
            net(inputs[0])
            imdn(inputs[0])  # warm-up: first calls allocate
        mine, theirs = time_side_by_side([net, imdn], inputs, args.rounds, s)
        rows.append(PeerRow(s, name, count_params(net), count_params(imdn), count_macs(net) / 1e9,
                            count_macs(imdn) / 1e9, len(inputs), mine, theirs))
        print(f"  x{s}: {name} {mine:.3f} MP/s, IMDN {theirs:.3f} MP/s ({mine / theirs:.2f}x, "
              f"{precision_name(dtype)})", flush=True)
    print(f"{torch.get_num_threads()} CPU thread(s), LR of {args.hr}")
    print(table(rows))
    if args.json:
        write_json(args.json, {"threads": torch.get_num_threads(), "hr": args.hr, "precision": args.precision,
                               "rows": [{**asdict(r), "ratio": r.ratio} for r in rows]})
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, prog="python -m research.peers")


if __name__ == "__main__":
    sys.exit(main())
