"""``sr bench``: the thin entry point to the checkout's benchmarks/ (the benchmarks' own tests:
tests/benchmarks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sr.cli import main
from sr.commands import bench
from sr.errors import CLIError

REPO = Path(__file__).resolve().parents[2]


def test_the_benchmarks_come_from_the_checkout_sr_runs_from() -> None:
    assert bench.find_checkout() == REPO
    assert Path(bench.load_benchmark("tooling").__file__) == REPO / "benchmarks" / "tooling.py"
    assert set(bench.BENCHMARKS) <= {p.stem for p in (REPO / "benchmarks").glob("*.py")}


def test_the_benchmarks_load_without_adding_the_checkout_to_sys_path(tmp_path) -> None:
    """Run from elsewhere: only benchmarks/ becomes importable (the checkout's other folders, data/ or
    research/, must not shadow installed packages), and benchmarks that import each other still do."""
    code = ("import sys\n"
            "before = list(sys.path)\n"
            "from sr.commands import bench\n"
            "hostile = bench.load_benchmark('soak_hostile')  # imports benchmarks.serve itself\n"
            "print(sys.path == before, hostile.__file__, sys.modules['benchmarks.serve'].__file__)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          check=True)
    assert proc.stdout.split() == ["True", str(REPO / "benchmarks" / "soak_hostile.py"),
                                   str(REPO / "benchmarks" / "serve.py")]


def test_another_package_named_benchmarks_is_a_clear_error(monkeypatch, tmp_path) -> None:
    other = tmp_path / "benchmarks"
    other.mkdir()
    (other / "__init__.py").write_text("")
    fake = type(sys)("benchmarks")
    fake.__path__ = [str(other)]
    fake.__file__ = str(other / "__init__.py")
    monkeypatch.setitem(sys.modules, "benchmarks", fake)
    with pytest.raises(CLIError, match="another package named benchmarks is already imported"):
        bench.load_benchmark("tooling")


def test_installed_without_the_benchmarks_it_says_how_to_get_them(monkeypatch, capsys) -> None:
    """A wheel install away from a checkout: one line and exit 2, whatever the benchmark's flags."""
    monkeypatch.setattr(bench, "find_checkout", lambda: None)
    with pytest.raises(SystemExit) as stop:
        main(["bench", "upscale", "--images", "hr", "--threads", "1"])
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "sr bench: error: the benchmarks are not part of the installed package; run sr bench from a "
        "checkout of the source (pip install -e '.[bench]' there; docs/benchmarks.md)\n"
    )


def test_an_unknown_benchmark_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["bench", "no-such-bench"])
    assert stop.value.code == 2
    assert "invalid choice: 'no-such-bench'" in capsys.readouterr().err
