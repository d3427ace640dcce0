"""The ``sr`` dispatcher: sub-command modules, CLIError -> message + exit code, never a traceback."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
import types

import pytest

from sr.cli import COMMANDS, main
from sr.errors import CLIError


@pytest.fixture(autouse=True)
def _restore_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main rewrites sys.argv


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A throw-away sub-command 'fake' whose run() does what the test sets in mod.action."""
    mod = types.ModuleType("sr.commands._fake")
    mod.action = lambda args: 0

    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--n", type=int, default=1)

    mod.add_arguments = add_arguments
    mod.run = lambda args: mod.action(args)
    monkeypatch.setitem(sys.modules, "sr.commands._fake", mod)
    monkeypatch.setitem(COMMANDS, "fake", ("_fake", "a test command"))
    return mod


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_a_module(name: str, capsys: pytest.CaptureFixture,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(f"sr.commands.{COMMANDS[name][0]}")
    assert callable(module.add_arguments) and callable(module.run)
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)  # arguments register without clashes
    own = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    assert own, "add_arguments registered nothing"
    # ... and `sr NAME --help`, through the dispatcher, shows that module's arguments
    monkeypatch.setattr("sr.cli.prepare_environment", lambda command: None)  # leave os.environ be
    with pytest.raises(SystemExit) as exit_info:
        main([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: sr {name} ") and COMMANDS[name][1] in " ".join(out.split()), out
    shown = [a.option_strings[0] if a.option_strings else a.metavar or a.dest
             for a in own if a.help != argparse.SUPPRESS]
    assert [flag for flag in shown if flag not in out] == []


def test_dispatch_passes_arguments_and_exit_code(fake: types.ModuleType) -> None:
    seen = []
    fake.action = lambda args: seen.append(args.n) or 3
    assert main(["fake", "--n", "7"]) == 3
    assert seen == [7]
    fake.action = lambda args: None  # returning nothing means success
    assert main(["fake"]) == 0


def test_cli_error_becomes_message(fake: types.ModuleType, capsys: pytest.CaptureFixture) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise CLIError("the thing is wrong")

    fake.action = fail
    assert main(["fake"]) == 2
    assert capsys.readouterr().err == "sr fake: error: the thing is wrong\n"

    def fail_5(args: argparse.Namespace) -> int:
        raise CLIError("busy", code=5)

    fake.action = fail_5
    assert main(["fake"]) == 5


def test_keyboard_interrupt_exits_130(fake: types.ModuleType, capsys: pytest.CaptureFixture) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    fake.action = interrupted
    assert main(["fake"]) == 130
    assert "interrupted" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["no-such-command"], ["fake", "--n", "x"]])
def test_usage_errors_exit_2(fake: types.ModuleType, capsys: pytest.CaptureFixture, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: " in err and "usage:" not in err, err


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.split("exit codes:")[1].splitlines() if line[:6].strip()]
    assert listed == ["0", "1", "2", "130"]


@pytest.mark.parametrize("argv", [
    [],
    ["upscale", "x.png", "-o", "out", "--denoise", "2"],
    ["upscale", "x.png", "-o", "out", "--look", "2"],
    ["upscale", "x.png", "-o", "out", "--scale", "7"],
    ["upscale", "x.png", "-o", "out", "--precision", "fp8"],
])
def test_argument_errors_are_one_line_and_import_no_torch(argv: list[str]) -> None:
    """One line and exit 2, decided before torch is imported (an error then takes as long as --version)."""
    # as the `sr` console script calls it: sys.exit(main()), whether argparse or a check refuses
    code = ("import sys; from sr.cli import main\n"
            "try:\n    sys.exit(main(sys.argv[1:]))\n"
            "except SystemExit as e:\n    assert 'torch' not in sys.modules, 'torch imported'; raise\n")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("sr"), proc.stderr


def test_top_level_help_lists_every_command_and_imports_none() -> None:
    """`sr --help` names each command with its help line; the modules are not imported, only named
    (nor torch): a fresh interpreter, since this one has imported them all already. sr.commands.bench
    is the one exception, for its list of benchmark names (it imports no benchmark and no torch)."""
    code = ("import sys; from sr.cli import main\n"
            "try:\n    main(['--help'])\n"
            "except SystemExit:\n"
            "    loaded = [m for m in sys.modules if m.startswith(('sr.commands.', 'torch', 'benchmarks'))]\n"
            "    print(sorted(loaded), file=sys.stderr)\n")
    env = {**os.environ, "COLUMNS": "300"}  # one line per command
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stderr == "['sr.commands.bench']\n", proc.stderr
    for name, (_module, help_text) in COMMANDS.items():
        line = rf"^ +{name} +{re.escape(help_text)}$"
        assert re.search(line, proc.stdout, re.MULTILINE), (name, proc.stdout)


def test_sr_help_and_sr_bench_help_name_the_same_benchmarks(capsys: pytest.CaptureFixture) -> None:
    from sr.commands.bench import BENCHMARKS

    listed = re.escape(", ".join(BENCHMARKS))
    assert re.fullmatch(rf"benchmarks: {listed}", COMMANDS["bench"][1])
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the description
    assert f"benchmarks: {', '.join(BENCHMARKS)}" in out
    assert all(f" {name} " in out for name in BENCHMARKS)


def test_version_is_the_package_version(capsys: pytest.CaptureFixture) -> None:
    import sr

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"sr {sr.__version__}"
    assert sr.__version__.count(".") == 2


def test_python_m_sr_usage_error_has_no_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "sr", "no-such-command"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "invalid choice: 'no-such-command'" in proc.stderr and "Traceback" not in proc.stderr


def test_python_m_sr_cli_builds_lazy_sub_parsers() -> None:
    """`python -m sr.cli` runs a second copy of the module as __main__; its sub-parsers must still see
    the arguments (they were empty there, so `bench upscale --images ...` was refused)."""
    proc = subprocess.run([sys.executable, "-m", "sr.cli", "bench", "paths", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "--paths" in proc.stdout


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    """`sr info ... | head -1`: the pipe closes before sr writes; sr stops quietly (exit 1, as Python's
    docs advise), where it used to print a BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "sr", "info", "asa-base-x2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "Exception ignored" not in err, err


@pytest.mark.parametrize("command", ["serve", "upscale"])
def test_serve_and_upscale_run_with_a_passive_openmp_wait_policy_unless_one_is_set(monkeypatch, command):
    import os

    from sr.cli import prepare_environment

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    prepare_environment("eval")
    assert "OMP_WAIT_POLICY" not in os.environ  # only where it was measured
    with pytest.raises(SystemExit):
        main([command, "--no-such-flag"])  # set before the parser imports the command (and torch)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    prepare_environment(command)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"  # the user's choice is kept
