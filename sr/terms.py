"""The terms of the image collections the shipped weights were trained on, by folder name.

As ``../shared/datasets/README.md`` states them; the model card (weights/README.md, "Licence and
terms") explains what they mean for users. ``sr info`` shows them per family from each file's
``train_data`` metadata, so a new family's terms follow from the data it names.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath

# folder name -> (collection, terms at its source)
COLLECTIONS: dict[str, tuple[str, str]] = {
    "train": ("BSD200, T91, Kodak24, McMaster", "not stated at the source"),
    "bsds500test": ("BSDS500", "research use"),
    "polyu_half": ("PolyU", "non-commercial research only"),
    "sunhays80_half": ("Sun-Hays 80", "no licence stated"),
    "city100_half": ("City100", "MIT"),
    "div2k_gray": ("DIV2K", "academic research"),
}
# The terms, most restrictive first; PERMISSIVE ones put no condition on use and go unnamed.
ORDER = ("non-commercial research only", "no licence stated", "academic research", "research use",
         "not stated at the source")


def collections(train_data: str | None) -> list[str]:
    """The folder names of a weights file's ``train_data`` metadata (a JSON list of paths)."""
    try:
        paths = json.loads(train_data or "[]")
    except ValueError:
        return []
    return [PurePosixPath(str(p).replace("\\", "/")).name for p in paths] if isinstance(paths, list) else []


def conditions(train_data: str | None) -> list[str]:
    """The conditions this data puts on use, most restrictive first, each with whose they are:
    ``["non-commercial research only (PolyU)", "academic research (DIV2K)", ...]``."""
    names = collections(train_data)
    if not names:
        return ["unknown: the file does not record its training data"]
    unknown = [n for n in names if n not in COLLECTIONS]
    parts = []
    for terms in ORDER:
        whose = [COLLECTIONS[n][0] for n in names if n in COLLECTIONS and COLLECTIONS[n][1] == terms]
        if whose:
            parts.append(f"{terms} ({', '.join(whose)})")
    if unknown:
        parts.insert(0, f"unknown terms ({', '.join(unknown)})")
    if not parts:
        return ["no conditions from the training data (" + ", ".join(COLLECTIONS[n][1] for n in names) + ")"]
    return parts
