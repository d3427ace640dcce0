"""Where the shipped weights are found: the checkout's weights/, else the wheel's sr/_weights."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import sr.weights

REPO = Path(__file__).resolve().parents[1]


def test_a_checkout_uses_its_weights_folder():
    assert sr.weights.WEIGHTS_DIR == REPO / "weights"
    assert (sr.weights.WEIGHTS_DIR / "asa-base-x2.safetensors").is_file()


def test_an_installed_package_uses_the_copy_inside_it(tmp_path):
    """A package tree with no weights/ beside it (as site-packages is) looks in sr/_weights; the
    build hook in setup.py puts the shipped files there (.ci/wheel-check installs a real wheel)."""
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "sr", site / "sr", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "sr" / "_weights").mkdir()
    shutil.copy2(REPO / "weights" / "asa-base-x2.safetensors", site / "sr" / "_weights")
    code = "import sr.weights as w; print(w.WEIGHTS_DIR); print(w.resolve_weights('asa-base-x2'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    folder, found = out.stdout.split()
    assert Path(folder) == site / "sr" / "_weights"
    assert Path(found) == site / "sr" / "_weights" / "asa-base-x2.safetensors"
