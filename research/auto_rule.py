"""``python -m research.auto_rule``: what ``--model auto`` scores on a set, from two ``sr eval --json`` files.

``auto`` sends each input file to one of two models by what the file says of its compression
(:func:`sr.inference.model_choice.choose`). Its score on a set is therefore the mean, over the
images, of the chosen model's per-image PSNR: this script reads the per-image results of the default
family and of the photo family (``sr eval --json`` on the same sets, LR folders given with ``--lr`` or
made by ``--degrade``), asks the rule about each image's LR file, and prints per set: how many files
went to photo, the two models' scores and auto's, at the shipped threshold and at every other
``--quality`` threshold asked for (a JPEG or lossy WebP of that estimated quality or more goes to
the default family). Sets scored without an LR folder (bicubic LR made in memory) are lossless: auto is the
default family there by construction, and they are listed as such.

    sr eval --hr D/valid --lr runs/q95/valid-q90-x2 --scale 2 --model asa-base-x2 -q --json base.json
    sr eval --hr D/valid --lr runs/q95/valid-q90-x2 --scale 2 --model photo-x2 -q --json photo.json
    python -m research.auto_rule base.json photo.json --quality 90 95
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from sr import NEAR_LOSSLESS_QUALITY, PHOTO_MODEL
from sr.errors import CLIError
from sr.evaluation.protocol import list_images
from sr.evaluation.sets import match_lr
from sr.inference.model_choice import choose
from sr.lossy import Compression, inspect_compression

from ._script import run_script


@dataclasses.dataclass
class SetRule:
    """One set under the rule: per image, the two models' PSNR and the file's compression."""

    name: str
    default: list[float]
    photo: list[float]
    compressions: list[Compression | None]

    def auto(self, quality: int) -> tuple[float, int]:
        """(auto's mean PSNR, files sent to photo) with nearly lossless files from ``quality`` up."""
        picks = [_to_photo(c, quality) for c in self.compressions]
        pairs = zip(self.default, self.photo, picks, strict=True)
        scores = [p if to_photo else d for d, p, to_photo in pairs]
        return sum(scores) / len(scores), sum(picks)


def _to_photo(compression: Compression | None, quality: int) -> bool:
    """The shipped rule with its quality threshold moved to ``quality``."""
    return choose(compression, threshold=quality).model == PHOTO_MODEL


def _load(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not an sr eval --json file ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("sets"), list):
        raise ValueError(f"{path}: not an sr eval --json file (no 'sets')")
    return doc


def pair_sets(default_doc: dict, photo_doc: dict) -> list[SetRule]:
    """The sets both files scored, in the default file's order, each image's LR compression read."""
    photo_sets = {s["name"]: s for s in photo_doc["sets"]}
    rules = []
    for s in default_doc["sets"]:
        other = photo_sets.get(s["name"])
        if other is None:
            continue
        if other.get("lr") != s.get("lr"):
            raise ValueError(f"set {s['name']}: the two files scored other LR folders "
                             f"({s.get('lr')} / {other.get('lr')})")
        photo_by_image = {r["image"]: r["psnr"] for r in other["per_image"]}
        names = [r["image"] for r in s["per_image"]]
        if sorted(names) != sorted(photo_by_image):
            raise ValueError(f"set {s['name']}: the two files scored other images")
        if s.get("lr"):
            hr_files = [f for f in list_images(Path(s["hr"])) if f.stem in set(names)]
            lr_by_image = dict(zip((f.stem for f in hr_files), match_lr(hr_files, list_images(Path(s["lr"]))),
                                   strict=True))
            compressions = [inspect_compression(lr_by_image[n]) for n in names]
        else:
            compressions = [None] * len(names)  # bicubic LR made in memory: lossless
        rules.append(SetRule(s["name"], [r["psnr"] for r in s["per_image"]],
                             [photo_by_image[n] for n in names], compressions))
    if not rules:
        raise ValueError("the two files share no set")
    return rules


def table(rules: list[SetRule], qualities: list[int]) -> str:
    heads = [f"auto, q>={q} default" for q in qualities]
    lines = ["| set | images | default | photo | " + " | ".join(heads) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(heads)]
    for r in rules:
        n = len(r.default)
        cells = []
        for q in qualities:
            score, to_photo = r.auto(q)
            cells.append(f"{score:.3f} ({to_photo}/{n} photo)")
        lines.append(f"| {r.name} | {n} | {sum(r.default) / n:.3f} | {sum(r.photo) / n:.3f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("default_json", type=Path, help="sr eval --json of the default family (asa-base)")
    p.add_argument("photo_json", type=Path, help="sr eval --json of the photo family, same sets")
    p.add_argument("--quality", type=int, nargs="*", default=[],
                   help=f"other quality thresholds (JPEG, lossy WebP) to score beside the shipped "
                        f"{NEAR_LOSSLESS_QUALITY} (101 = every lossy file to photo)")


def run(args: argparse.Namespace) -> int:
    bad = [q for q in args.quality if not 1 <= q <= 101]
    if bad:
        raise CLIError(f"--quality takes 1..101, got {bad[0]}")
    try:
        rules = pair_sets(_load(args.default_json), _load(args.photo_json))
    except (OSError, ValueError) as e:  # EvaluationError included: an LR folder gone or renamed
        raise CLIError(str(e)) from None
    qualities = list(dict.fromkeys([NEAR_LOSSLESS_QUALITY, *args.quality]))
    print(table(rules, qualities))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(__doc__, add_arguments, run, argv, "python -m research.auto_rule")


if __name__ == "__main__":
    sys.exit(main())
