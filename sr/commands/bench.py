"""``sr bench WHAT``: benchmarks of what users run (not tests). Each lives in the checkout's
``benchmarks/<what>.py`` with add_arguments/run, beside research/; neither is in the wheel, so ``sr bench``
runs them from a checkout of the source and, installed from a wheel, says how to get them."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from ..errors import CLIError

BENCHMARKS = {
    "attention": "attention family: time and peak memory vs dense, by feature-map size",
    "train": "training-step time per preset and attention kind",
    "upscale": "upscaling throughput (output MP/s) of shipped models vs bicubic",
    "paths": "inference paths side by side: tiered vs static attention, torch.compile, onnxruntime",
    "serve": "bounded load test of the HTTP service on loopback",
    "cost": "attention share of a forward and achieved conv TFLOP/s, per model, precision and tile",
    "contention": "throughput by workers x threads with and without competing CPU load (torch, openvino)",
    "models": "a community model file through sr vs spandrel's own call: seconds, MP/s, ratio, max abs diff",
}

NOT_INSTALLED = (
    "the benchmarks are not part of the installed package; run sr bench from a checkout of the "
    "source (pip install -e '.[bench]' there; docs/benchmarks.md)"
)


def find_checkout() -> Path | None:
    """The source checkout holding ``benchmarks/``: the one this sr was loaded from (an editable
    install), else the current folder; None when neither is one (a wheel install elsewhere)."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        if (root / "pyproject.toml").is_file() and (root / "benchmarks" / "__init__.py").is_file():
            return root
    return None


def load_benchmark(name: str) -> ModuleType | None:
    """``benchmarks.<name>`` from the checkout, or None where there is none."""
    root = find_checkout()
    if root is None:
        return None
    _import_package(root / "benchmarks")
    return importlib.import_module(f"benchmarks.{name}")


def _import_package(folder: Path) -> None:
    """Import ``folder`` as the package ``benchmarks``, so ``benchmarks.<name>`` (and the benchmarks'
    own imports of each other) resolve inside it. Only that folder is made importable: putting the
    whole checkout on sys.path would let its other folders shadow installed packages."""
    loaded = sys.modules.get("benchmarks")
    if loaded is not None:
        if folder.resolve() not in {Path(p).resolve() for p in getattr(loaded, "__path__", [])}:
            raise CLIError(f"another package named benchmarks is already imported ({loaded.__file__}), "
                           f"not the checkout's {folder}")
        return
    spec = importlib.util.spec_from_file_location("benchmarks", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None  # a .py file always has a spec and a loader
    package = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = package
    try:
        spec.loader.exec_module(package)
    except BaseException:
        del sys.modules["benchmarks"]
        raise


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str] = ()) -> None:
    sub = p.add_subparsers(dest="bench", metavar="WHAT", required=True)
    # Only the chosen benchmark's module is imported (they pull in heavy or optional packages).
    chosen = next((a for a in argv if a in BENCHMARKS), None)
    for name, help_text in BENCHMARKS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if name != chosen:
            continue
        module = load_benchmark(name)
        if module is None:
            # its flags cannot be checked without it: the one line now, as a usage error is
            p.exit(2, f"{p.prog}: error: {NOT_INSTALLED}\n")
        module.add_arguments(sp)


def run(args: argparse.Namespace) -> int:
    module = load_benchmark(args.bench)
    if module is None:
        raise CLIError(NOT_INSTALLED)
    return int(module.run(args) or 0)
