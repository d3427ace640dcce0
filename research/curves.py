"""``python -m research.curves``: where training on the new data stops, from the validations of every cycle.

The points are a CSV, one row per validation (``docs/curves/new-data.csv`` in the repository):
``scale,run,preset,parent,step,batch,patch,valid,set5,set14``. ``parent`` is the ``RUN:STEP`` a
run started from (empty for the weights before the new data, the run ``start``). Along a run's
lineage the LR pixels seen are summed (steps x batch x patch^2), which compares runs made on
different machines and precisions.

For every run that continues an earlier cycle on the same data (both ends annealed), the table
gives the gain and the dB per doubling of the LR pixels seen, and, at that slope, how many times
the pixels seen so far it would take to reach CARN-M on Set5 / Set14: a log-linear extrapolation,
the usual shape of a data-bound curve, not a promise.

- ``--add-run RUN_DIR --parent RUN:STEP``: append a finished run's validations (from its
  ``log.jsonl`` and ``config.json``) to the CSV, so the figure can be remade from the repository.
- ``--figure PNG``: a grid, one row per scale, one column per set (valid, Set5, Set14), each run a
  line from the point it started at, CARN-M dashed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.tooling import write_json
from sr.errors import CLIError

from ._script import run_script

FIELDS = ["scale", "run", "preset", "parent", "step", "batch", "patch", "valid", "set5", "set14"]
SETS = ("valid", "set5", "set14")
LABELS = {"valid": "valid", "set5": "Set5", "set14": "Set14"}
# CARN-M's released weights measured under this project's protocol: the bar.
CARN_M = {2: {"set5": 37.70, "set14": 33.25}, 3: {"set5": 34.10, "set14": 30.05},
          4: {"set5": 31.90, "set14": 28.35}}
COLOURS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14),
           (140, 86, 75), (23, 190, 207), (188, 189, 34), (227, 119, 194)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--csv", default="docs/curves/new-data.csv",
                   help="the validations, one row each (default: docs/curves/new-data.csv)")
    p.add_argument("--add-run", metavar="RUN_DIR", help="append this run's validations to --csv and stop")
    p.add_argument("--parent", metavar="RUN:STEP", help="with --add-run: the run and step it started from")
    p.add_argument("--figure", metavar="PNG", help="also draw the curves here")
    p.add_argument("--json", metavar="FILE", help="also write the table as JSON to FILE")


@dataclass
class Point:
    scale: int
    run: str
    preset: str
    step: int
    parent: str           # RUN:STEP the run started from ('' for the weights before the new data)
    mpix: float           # LR megapixels seen on the new data along the lineage, at this validation
    psnr: dict[str, float]


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise CLIError(f"--csv {path}: no such file")
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    rows = list(csv.DictReader(lines))
    if not rows or set(FIELDS) - set(rows[0]):
        raise CLIError(f"--csv {path}: needs a header with {','.join(FIELDS)} and at least one row")
    return rows


def lineage_points(rows: list[dict[str, str]]) -> list[Point]:
    """Every validation with the LR megapixels seen along its run's lineage."""
    by_run: dict[tuple[int, str], list[dict[str, str]]] = {}
    try:
        for r in rows:
            by_run.setdefault((int(r["scale"]), r["run"]), []).append(r)

        def offset(scale: int, parent: str, depth: int = 0) -> float:
            # pixels seen before a run starts: its parent's steps there, plus the parent's own offset
            if not parent:
                return 0.0
            name, _, step = parent.rpartition(":")
            if (scale, name) not in by_run or depth > len(by_run):
                raise CLIError(f"parent {parent!r} (x{scale}): no such run in the CSV, or a cycle")
            prow = by_run[(scale, name)][0]
            seen = int(step) * int(prow["batch"]) * int(prow["patch"]) ** 2 / 1e6
            return offset(scale, prow["parent"], depth + 1) + seen

        points = []
        for (scale, run), rs in by_run.items():
            base = offset(scale, rs[0]["parent"])
            for r in rs:
                points.append(Point(scale, run, r["preset"], int(r["step"]), r["parent"],
                                    base + int(r["step"]) * int(r["batch"]) * int(r["patch"]) ** 2 / 1e6,
                                    {s: float(r[s]) for s in SETS}))
    except (ValueError, TypeError) as e:
        raise CLIError(f"a CSV row is not numeric where it must be: {e}") from None
    return points


def parent_point(points: list[Point], run: list[Point]) -> Point:
    """The validation a run started from: its parent's at the parent step."""
    name, _, step = run[0].parent.rpartition(":")
    for p in points:
        if p.scale == run[0].scale and p.run == name and p.step == int(step):
            return p
    raise CLIError(f"run {run[0].run} (x{run[0].scale}): its parent {run[0].parent} has no validation "
                   "at that step in the CSV")


def runs_of(points: list[Point]) -> dict[tuple[int, str], list[Point]]:
    out: dict[tuple[int, str], list[Point]] = {}
    for p in points:
        out.setdefault((p.scale, p.run), []).append(p)
    return {k: sorted(v, key=lambda p: p.mpix) for k, v in out.items()}


def slopes(points: list[Point]) -> list[dict]:
    """Per run that continues an earlier new-data run: gains from its start, dB per doubling of the
    LR pixels seen, the gap to CARN-M and the pixels that slope would need to close it."""
    out = []
    for (scale, name), run in runs_of(points).items():
        if not run[0].parent or run[0].parent.rpartition(":")[0] == "start":
            continue  # the first cycle: its start saw no new data, so no doubling to measure
        p0, p1 = parent_point(points, run), run[-1]
        doublings = math.log2(p1.mpix / p0.mpix)
        rec: dict = {"scale": scale, "run": name, "preset": p1.preset, "from_mpix": round(p0.mpix, 1),
                     "to_mpix": round(p1.mpix, 1), "doublings": round(doublings, 3)}
        for s in SETS:
            gain = p1.psnr[s] - p0.psnr[s]
            rec[s] = {"end": p1.psnr[s], "gain": round(gain, 4), "per_doubling": round(gain / doublings, 4)}
            if s in CARN_M.get(scale, {}):
                gap = CARN_M[scale][s] - p1.psnr[s]
                slope = gain / doublings
                # times the pixels seen so far that the same slope needs to close the gap
                # (None: the run gained nothing there, so no slope reaches it)
                times = 1.0 if gap <= 0 else (2 ** (gap / slope) if slope > 0 else None)
                rec[s].update(gap=round(gap, 4), times_pixels=times,
                              gpix_needed=None if times is None else p1.mpix * times / 1e3)
        out.append(rec)
    return out


def _times(x: float | None) -> str:
    if x is None:
        return "never (no gain)"
    return "reached" if x <= 1 else (f"{x:,.0f}x" if x < 1e5 else f"{x:.1e}x")


def table(recs: list[dict]) -> str:
    lines = ["| scale | run | preset | LR Mpx seen | valid gain | Set5 gain | Set14 gain | Set5 dB/doubling "
             "| Set14 dB/doubling | gap to CARN-M, Set5 / Set14 | pixels that slope needs, Set5 / Set14 |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in recs:
        gaps = " / ".join(f"{r[s]['gap']:.3f}" if "gap" in r[s] else "-" for s in ("set5", "set14"))
        need = " / ".join(_times(r[s]["times_pixels"]) if "gap" in r[s] else "-" for s in ("set5", "set14"))
        gains = " | ".join(f"{r[s]['gain']:+.4f}" for s in SETS)
        slopes_ = " | ".join(f"{r[s]['per_doubling']:+.4f}" for s in ("set5", "set14"))
        lines.append(f"| x{r['scale']} | {r['run']} | {r['preset']} | {r['from_mpix']:.0f} -> "
                     f"{r['to_mpix']:.0f} | {gains} | {slopes_} | {gaps} | {need} |")
    return "\n".join(lines)


def add_run(run_dir: Path, parent: str, csv_path: Path) -> int:
    """Append a run's validations to the CSV (rows already there are kept, not repeated)."""
    for name in ("config.json", "log.jsonl"):
        if not (run_dir / name).is_file():
            raise CLIError(f"--add-run {run_dir}: no {name} (not a training run folder)")
    if parent and not parent.rpartition(":")[2].isdigit():
        raise CLIError(f"--parent {parent!r}: expected RUN:STEP, e.g. x2-extra:7000")
    rows = read_rows(csv_path)
    cfg = json.loads((run_dir / "config.json").read_text())
    seen = {(r["scale"], r["run"], r["step"]) for r in rows}
    new = []
    for line in (run_dir / "log.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("event") != "val":
            continue
        missing = [k for k in ("valid_psnr", "Set5_psnr", "Set14_psnr") if k not in rec]
        if missing:
            raise CLIError(f"--add-run {run_dir}: step {rec['step']} validated without {', '.join(missing)} "
                           "(the curves need --val valid Set5 Set14)")
        row = {"scale": str(cfg["scale"]), "run": cfg["name"], "preset": cfg["preset"], "parent": parent,
               "step": str(rec["step"]), "batch": str(cfg["batch"]), "patch": str(cfg["patch"]),
               "valid": f"{rec['valid_psnr']:.4f}", "set5": f"{rec['Set5_psnr']:.4f}",
               "set14": f"{rec['Set14_psnr']:.4f}"}
        if (row["scale"], row["run"], row["step"]) not in seen:
            new.append(row)
    if not new:
        return 0
    lineage_points(rows + new)  # the parent must resolve before anything is written
    buf = io.StringIO()
    csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n").writerows(new)
    from sr.io import atomic_write

    text = csv_path.read_text()
    atomic_write(csv_path, (text + ("" if text.endswith("\n") else "\n") + buf.getvalue()).encode())
    return len(new)


def draw(points: list[Point], out: Path) -> None:
    from PIL import Image, ImageDraw, ImageFont

    scales = sorted({p.scale for p in points})
    runs = runs_of(points)
    names = sorted({n for (_, n) in runs if n != "start"})
    colour = {n: COLOURS[i % len(COLOURS)] for i, n in enumerate(names)}
    cw, ch, ml, mb, mt, gap, legend = 330, 210, 62, 34, 24, 14, 190
    canvas = Image.new("RGB", (len(SETS) * (cw + ml + gap) + legend, len(scales) * (ch + mb + mt)), "white")
    pen = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    for i, scale in enumerate(scales):
        pts = [p for p in points if p.scale == scale]
        xmax = max(p.mpix for p in pts) * 1.05 or 1.0
        for j, s in enumerate(SETS):
            x0, y0 = j * (cw + ml + gap) + ml, i * (ch + mb + mt) + mt
            bar = CARN_M.get(scale, {}).get(s)
            vals = [p.psnr[s] for p in pts] + ([bar] if bar is not None else [])
            lo, hi = min(vals) - 0.01, max(vals) + 0.01

            def xy(mpix: float, v: float, x0: int = x0, y0: int = y0, lo: float = lo, hi: float = hi,
                   xmax: float = xmax) -> tuple[float, float]:
                return x0 + mpix / xmax * cw, y0 + ch - (v - lo) / (hi - lo) * ch

            pen.rectangle([x0, y0, x0 + cw, y0 + ch], outline=(120, 120, 120))
            for k in range(5):
                v, m = lo + (hi - lo) * k / 4, xmax * k / 4
                pen.text((x0 - 58, xy(0, v)[1] - 5), f"{v:.3f}", fill="black", font=font)
                pen.text((xy(m, lo)[0] - 10, y0 + ch + 4), f"{m:.0f}", fill="black", font=font)
            title = f"x{scale} {LABELS[s]} PSNR (dB) vs LR Mpx seen"
            pen.text((x0 + 4, y0 - 14), title, fill="black", font=font)
            if bar is not None:
                yb = xy(0, bar)[1]
                for xd in range(x0, x0 + cw, 8):
                    pen.line([xd, yb, xd + 4, yb], fill="black")
                pen.text((x0 + cw - 70, yb + 2), "CARN-M", fill="black", font=font)
            for (sc, name), run in runs.items():
                if sc != scale or name == "start":
                    continue
                head = [parent_point(points, run)] if run[0].parent else []
                line = [xy(p.mpix, p.psnr[s]) for p in head + run]
                if len(line) > 1:
                    pen.line(line, fill=colour[name], width=2)
                for x, y in line[len(head):]:
                    pen.ellipse([x - 2, y - 2, x + 2, y + 2], fill=colour[name])
            for p in runs.get((scale, "start"), []):
                x, y = xy(p.mpix, p.psnr[s])
                pen.ellipse([x - 3, y - 3, x + 3, y + 3], fill="black")
    lx = len(SETS) * (cw + ml + gap) + 4
    pen.text((lx, mt), "black dot: the weights before", fill="black", font=font)
    pen.text((lx, mt + 12), "the new data (run 'start')", fill="black", font=font)
    for k, name in enumerate(names):
        y = mt + 40 + 14 * k
        pen.line([lx, y + 5, lx + 18, y + 5], fill=colour[name], width=3)
        pen.text((lx + 24, y), name, fill="black", font=font)
    from sr.io import atomic_write

    buf = io.BytesIO()
    canvas.convert("P", palette=Image.Palette.ADAPTIVE, colors=64).save(buf, format="PNG", optimize=True)
    atomic_write(out, buf.getvalue())


def run(args: argparse.Namespace) -> int:
    csv_path = Path(args.csv)
    if args.add_run:
        n = add_run(Path(args.add_run), args.parent or "", csv_path)
        print(f"{csv_path}: {n} rows added from {args.add_run}")
        return 0
    if args.parent:
        raise CLIError("--parent goes with --add-run")
    if args.figure and not Path(args.figure).resolve().parent.is_dir():
        raise CLIError(f"--figure {args.figure}: folder {Path(args.figure).parent} does not exist")
    points = lineage_points(read_rows(csv_path))
    recs = slopes(points)
    print(table(recs))
    if args.figure:
        draw(points, Path(args.figure))
        print(f"figure: {args.figure}")
    if args.json:
        write_json(args.json, {"csv": str(csv_path), "bar": "CARN-M", "runs": recs})
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, prog="python -m research.curves")


if __name__ == "__main__":
    sys.exit(main())
