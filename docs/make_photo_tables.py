"""Print the photo models' tables (docs/photo.md) from `sr eval --json` files.

    python docs/make_photo_tables.py runs/photo-eval

Each file is ``<name>-x<S>-{degraded,clean}.json`` as written by the commands in docs/photo.md
(``sr eval --degrade all --json ...`` and the same without ``--degrade``). Names: ``bicubic``,
``asa-base``, ``photo``, with ``-b0`` for ``--budget 0`` and ``photo-dN`` for a denoise-N blend.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LEVELS = ("clean", "web", "mild", "medium", "heavy", "blind mean", "chain")


def load(folder: Path, model: str, scale: int) -> dict[tuple[str, str], tuple[float, float]] | None:
    """(set, level) -> (psnr, ssim) for one model at one scale; None when its files are missing."""
    out = {}
    for kind in ("degraded", "clean"):
        f = folder / f"{model}-x{scale}-{kind}.json"
        if not f.is_file():
            return None
        doc = json.loads(f.read_text())
        for s in doc["sets"]:
            level = s.get("level") or "clean"
            base = s["name"].removesuffix(f"-{level}-x{scale}") if level != "clean" else s["name"]
            out[(base, level)] = (s["psnr"], s["ssim"])
        for b in doc.get("blind_means", []):
            out[(b["name"].removesuffix(f"-blind-mean-x{scale}"), "blind mean")] = (b["psnr"], b["ssim"])
    return out


def name(model: str, scale: int) -> str:
    return model


def quality_table(folder: Path, set_name: str, models: list[str]) -> str:
    rows = ["| level | " + " | ".join(f"{m} x{s}" for s in (2, 3, 4) for m in models) + " |",
            "|---|" + "---|" * (3 * len(models))]
    data = {(m, s): load(folder, name(m, s), s) for s in (2, 3, 4) for m in models}
    for level in LEVELS:
        cells = []
        for s in (2, 3, 4):
            for m in models:
                v = (data[(m, s)] or {}).get((set_name, level))
                cells.append(f"{v[0]:.2f} / {v[1]:.4f}" if v else "-")
        rows.append(f"| {level} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def delta_table(folder: Path, set_name: str, pairs: list[tuple[str, str, str]]) -> str:
    """Rows: level; columns: for each (label, a, b) and scale, PSNR(a) - PSNR(b)."""
    rows = ["| level | " + " | ".join(f"{label} x{s}" for label, _, _ in pairs for s in (2, 3, 4)) + " |",
            "|---|" + "---|" * (3 * len(pairs))]
    for level in LEVELS:
        cells = []
        for _, a, b in pairs:
            for s in (2, 3, 4):
                va = (load(folder, name(a, s), s) or {}).get((set_name, level))
                vb = (load(folder, name(b, s), s) or {}).get((set_name, level))
                cells.append(f"{va[0] - vb[0]:+.2f}" if va and vb else "-")
        rows.append(f"| {level} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def denoise_table(folder: Path, set_name: str, strengths: list[str]) -> str:
    levels = ("clean", "web", "blind mean")
    rows = ["| denoise | " + " | ".join(f"{lv} x{s}" for s in (2, 3, 4) for lv in levels) + " |",
            "|---|" + "---|" * 9]
    for d in strengths:
        cells = []
        for s in (2, 3, 4):
            model = {"0": "asa-base", "1": "photo"}.get(d, f"photo-d{d}")
            data = load(folder, model, s) or {}
            for lv in ("clean", "web", "blind mean"):
                v = data.get((set_name, lv))
                cells.append(f"{v[0]:.2f}" if v else "-")
        rows.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/photo-eval")
    for set_name in ("valid", "Set5", "Set14"):
        print(f"\n### {set_name}: PSNR / SSIM (Y)\n")
        print(quality_table(folder, set_name, ["bicubic", "asa-base", "photo"]))
    for set_name in ("valid", "Set14"):
        print(f"\n### {set_name}: photo's gain in dB\n")
        print(delta_table(folder, set_name, [("photo - bicubic", "photo", "bicubic"),
                                              ("photo - asa-base", "photo", "asa-base")]))
    print("\n### valid: attention off (--budget 0) costs, in dB\n")
    arms = [("photo", "photo", "photo-b0"), ("asa-base", "asa-base", "asa-base-b0")]
    print(delta_table(folder, "valid", arms))
    print("\n### valid: denoise strength, PSNR\n")
    print(denoise_table(folder, "valid", ["0", "0.25", "0.5", "0.75", "1"]))


if __name__ == "__main__":
    main()
