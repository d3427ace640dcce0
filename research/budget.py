"""``python -m research.budget``: does a trained model's budget follow detail, and what does halving it cost?

For a model with adaptive attention, on a folder of HR images (LR made as ``sr eval`` makes it):

- **Allocation.** Per block of ``--block`` x ``--block`` LR pixels: the budget (key regions
  attended, the mean over the model's attention blocks) and the gradient energy of the LR luminance
  (mean squared finite difference). Per image: the Spearman rank correlation between the two, and
  the share of the budget that the 20% most detailed blocks hold (a uniform budget gives 20%).
- **Halving.** PSNR (Y, border = scale, as ``sr eval``) at the model's budget, at half of it and at 0
  (attention off), and the attention blocks' own forward time at the budget and at half of it
  (timed by hooks on those blocks, whole images, fp32, the tiered inference path).
- **Where routing looks.** Of the key regions that the regions keep at the model's budget: the
  share that is the region itself, the share that is it or one of its 8 neighbours, and the mean
  distance (Chebyshev, in LR pixels between region corners). Pooled scoring alone almost never picks
  a region's own keys; ``own_first`` models put them at rank 0.
- ``--figure``: LR input | budget map | gradient energy of one image, side by side.
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.tooling import set_threads, write_json
from sr.errors import CLIError

from ._script import run_script

TOP_SHARE = 0.2  # "the 20% most detailed blocks"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True,
                   help="shipped model name or .safetensors file, with adaptive attention")
    p.add_argument("--hr", required=True, help="folder of HR images")
    p.add_argument("--images", type=int, default=0,
                   help="use the first N images, sorted by name (default: all)")
    p.add_argument("--block", type=int, default=16, help="block side in LR pixels (default 16)")
    p.add_argument("--rounds", type=int, default=2,
                   help="timed passes per budget; the fastest counts (default 2)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--figure", metavar="PNG", help="write LR | budget | gradient energy of one image here")
    p.add_argument("--figure-image", metavar="NAME",
                   help="the image for --figure, by file stem (default: the first)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


@dataclass
class ImageResult:
    name: str
    blocks: int
    spearman: float
    top_share: float  # share of the budget in the TOP_SHARE most detailed blocks
    psnr: float
    psnr_half: float
    psnr_off: float
    attention_ms: float
    attention_ms_half: float
    own_share: float  # of the kept key regions: the region itself
    near_share: float  # ... itself or one of its 8 neighbours
    route_distance_px: float  # mean distance of the kept key regions, LR pixels


def route_locality(routes: list) -> tuple[float, float, float]:
    """(own share, own-or-neighbour share, mean Chebyshev distance in regions) of the kept picks.

    routes: the ``aux["routes"]`` entries of the adaptive blocks, (idx (B, N, k) or None, k (B, N),
    (Hr, Wr)); rank r of a region is kept where r < its k.
    """
    own = near = dist = picks = 0
    for idx, k, (_, wr) in routes:
        if idx is None:  # every region skipped attention
            continue
        q = torch.arange(idx.shape[1])[None, :, None]  # (1, N, 1) query region ids
        d = torch.maximum((idx // wr - q // wr).abs(), (idx % wr - q % wr).abs())  # (B, N, k) in regions
        d = d[torch.arange(idx.shape[-1])[None, None] < k[..., None]]
        own, near = own + int((d == 0).sum()), near + int((d <= 1).sum())
        dist, picks = dist + int(d.sum()), picks + d.numel()
    if not picks:
        return (float("nan"),) * 3
    return own / picks, near / picks, dist / picks


def gradient_energy(lr: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 -> (H, W) squared finite-difference gradient of the luminance in [0, 1]."""
    from sr.metrics import rgb_to_y

    y = rgb_to_y(lr) / 255.0
    gx = np.zeros_like(y)
    gy = np.zeros_like(y)
    gx[:, :-1] = np.diff(y, axis=1)
    gy[:-1] = np.diff(y, axis=0)
    return gx * gx + gy * gy


def block_means(a: np.ndarray, block: int) -> np.ndarray:
    """(H, W) -> (H // block * W // block,) means of the whole blocks (a ragged edge is left out)."""
    h, w = (a.shape[0] // block) * block, (a.shape[1] // block) * block
    return a[:h, :w].reshape(h // block, block, w // block, block).mean(axis=(1, 3)).ravel()


def allocation(budget: np.ndarray, energy: np.ndarray, block: int) -> tuple[int, float, float]:
    """(blocks, Spearman rank correlation, share of the budget in the most detailed TOP_SHARE)."""
    from scipy.stats import spearmanr

    b, e = block_means(budget, block), block_means(energy, block)
    if b.size < 2:
        raise CLIError(f"an image has fewer than 2 blocks of {block} px: use a smaller --block")
    rho = float(spearmanr(b, e).statistic) if b.std() > 0 and e.std() > 0 else float("nan")
    top = np.argsort(-e, kind="stable")[: max(1, math.ceil(TOP_SHARE * b.size))]
    share = float(b[top].sum() / b.sum()) if b.sum() > 0 else float("nan")
    return b.size, rho, share


class AttentionTimer:
    """Seconds spent inside the given modules' forward calls (hooks; CPU, no synchronisation needed)."""

    def __init__(self, modules: list[torch.nn.Module]) -> None:
        self.seconds, self._start = 0.0, 0.0
        self.handles = []
        for m in modules:
            self.handles.append(m.register_forward_pre_hook(self._begin))
            self.handles.append(m.register_forward_hook(self._end))

    def _begin(self, module, args) -> None:
        self._start = time.perf_counter()

    def _end(self, module, args, output) -> None:
        self.seconds += time.perf_counter() - self._start

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def _load(name: str):
    from sr.weights import WeightsError, load_model

    try:
        desc = load_model(name)
    except WeightsError as e:
        raise CLIError(str(e)) from None
    blocks = desc.net.adaptive_blocks()
    if not blocks:
        raise CLIError(f"{name} has no adaptive attention: there is no budget to measure")
    return desc.net.eval(), blocks, desc


def _upscale(
    model, lr: np.ndarray, rounds: int, timer: AttentionTimer | None
) -> tuple[np.ndarray, np.ndarray, float, list]:
    """(sr uint8, budget map (H, W) at LR size, fastest attention seconds over ``rounds``, routes)."""
    x = torch.tensor(lr).permute(2, 0, 1)[None].float().div(255)
    best = math.inf
    with torch.inference_mode():
        for _ in range(max(1, rounds)):
            aux: dict = {"record_routes": True}  # keeps a reference to each block's routing: no cost
            if timer is not None:
                timer.seconds = 0.0
            y = model(x, aux)
            if timer is not None:
                best = min(best, timer.seconds)
    budget = torch.cat([m.float() for m in aux["budget_maps"]], 1).mean(1)[0].numpy()  # (H, W)
    sr = y.clamp(0, 1).mul(255).round()[0].permute(1, 2, 0).numpy().astype(np.uint8)
    return sr, budget, best, aux.get("routes", [])


def _figure(path: str, lr: np.ndarray, budget: np.ndarray, energy: np.ndarray, k_max: float) -> None:
    from PIL import Image

    from sr.inference.heatmap import budget_heatmap
    from sr.io import atomic_write

    e = np.log10(energy + 1e-6)  # gradient energy spans decades: a log scale shows flat and texture alike
    e = (e - e.min()) / max(float(e.max() - e.min()), 1e-12)
    gap = np.full((lr.shape[0], 4, 3), 255, np.uint8)
    panels = [lr[:, :, :3], gap, budget_heatmap(budget, k_max), gap, budget_heatmap(e, 1.0)]
    buf = io.BytesIO()
    Image.fromarray(np.concatenate(panels, axis=1)).save(buf, format="PNG")
    atomic_write(path, buf.getvalue())


def run(args: argparse.Namespace) -> int:
    from sr.evaluation import list_images, load_rgb_pair
    from sr.metrics import psnr

    if args.block < 4:
        raise CLIError(f"--block must be >= 4, got {args.block}")
    if args.images < 0 or args.rounds < 1:
        raise CLIError("--images must be >= 0 and --rounds >= 1")
    if not Path(args.hr).is_dir():
        raise CLIError(f"--hr {args.hr}: no such folder")
    if args.figure and not Path(args.figure).resolve().parent.is_dir():
        raise CLIError(f"--figure {args.figure}: folder {Path(args.figure).parent} does not exist")
    set_threads(args.threads)
    model, blocks, desc = _load(args.model)
    scale, budget, k_max = model.scale, blocks[0].budget, float(blocks[0].k_max)
    region_px = blocks[0].region * blocks[0].stride  # a region's side in LR pixels
    paths = list_images(args.hr)
    if args.images:
        paths = paths[: args.images]
    if not paths:
        raise CLIError(f"--hr {args.hr}: no images")
    if args.figure_image and args.figure_image not in {p.stem for p in paths}:
        raise CLIError(f"--figure-image {args.figure_image}: not among the images measured")
    print(f"{desc.name}: x{scale}, budget {budget:g} (k_max {k_max:g}), "
          f"{len(blocks)} attention blocks, {args.block}-px blocks, {torch.get_num_threads()} threads",
          flush=True)
    timer = AttentionTimer(blocks)
    results: list[ImageResult] = []
    try:
        for path in paths:
            hr, lr = load_rgb_pair(path, scale)
            model.set_attention_budget(budget)
            sr, bmap, t_full, routes = _upscale(model, lr, args.rounds, timer)
            energy = gradient_energy(lr)
            n, rho, share = allocation(bmap, energy, args.block)
            model.set_attention_budget(budget / 2)
            sr_half, _, t_half, _ = _upscale(model, lr, args.rounds, timer)
            model.set_attention_budget(0.0)
            sr_off, _, _, _ = _upscale(model, lr, 1, None)
            scores = [psnr(s.astype(np.float64), hr, scale, "y") for s in (sr, sr_half, sr_off)]
            own, near, dist = route_locality(routes)
            r = ImageResult(path.stem, n, rho, share, *scores, 1000 * t_full, 1000 * t_half, own, near,
                            dist * region_px)
            results.append(r)
            print(f"  {r.name:<24} rho {r.spearman:+.3f}  top-20% share {r.top_share:.1%}  "
                  f"PSNR {r.psnr:.3f} / half {r.psnr_half:.3f} / off {r.psnr_off:.3f}  "
                  f"attention {r.attention_ms:.0f} -> {r.attention_ms_half:.0f} ms  "
                  f"routes: own {r.own_share:.1%}, near {r.near_share:.1%}, {r.route_distance_px:.0f} px",
                  flush=True)
            if args.figure and path.stem == (args.figure_image or paths[0].stem):
                _figure(args.figure, lr, bmap, energy, k_max)
    finally:
        timer.close()
        model.set_attention_budget(budget)

    def mean(field: str) -> float:
        values = [getattr(r, field) for r in results if not math.isnan(getattr(r, field))]
        return statistics.fmean(values) if values else float("nan")

    summary = {
        "images": len(results), "spearman_mean": mean("spearman"), "top_share_mean": mean("top_share"),
        "psnr": mean("psnr"), "psnr_half": mean("psnr_half"), "psnr_off": mean("psnr_off"),
        "attention_ms": sum(r.attention_ms for r in results),
        "attention_ms_half": sum(r.attention_ms_half for r in results),
        "own_share_mean": mean("own_share"), "near_share_mean": mean("near_share"),
        "route_distance_px_mean": mean("route_distance_px"),
    }
    summary["half_budget_psnr_cost"] = summary["psnr"] - summary["psnr_half"]
    summary["attention_off_psnr_cost"] = summary["psnr"] - summary["psnr_off"]
    summary["half_budget_time_cut"] = 1 - summary["attention_ms_half"] / max(summary["attention_ms"], 1e-12)
    print(f"mean over {len(results)} images: Spearman {summary['spearman_mean']:+.3f}; the 20% most detailed "
          f"blocks hold {summary['top_share_mean']:.1%} of the budget")
    print(f"PSNR {summary['psnr']:.4f} dB; half budget {summary['psnr_half']:.4f} "
          f"({-summary['half_budget_psnr_cost']:+.4f}); attention off {summary['psnr_off']:.4f} "
          f"({-summary['attention_off_psnr_cost']:+.4f})")
    print(f"attention time at half budget: {summary['half_budget_time_cut']:.1%} less "
          f"({summary['attention_ms']:.0f} -> {summary['attention_ms_half']:.0f} ms)")
    print(f"routing: of the kept key regions, {summary['own_share_mean']:.1%} are the region itself, "
          f"{summary['near_share_mean']:.1%} it or a neighbour; mean distance "
          f"{summary['route_distance_px_mean']:.0f} LR px")
    if args.json:
        write_json(args.json, {"model": args.model, "budget": budget, "k_max": k_max, "block": args.block,
                               "threads": torch.get_num_threads(), "summary": summary,
                               "images": [asdict(r) for r in results]})
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, prog="python -m research.budget")


if __name__ == "__main__":
    sys.exit(main())
