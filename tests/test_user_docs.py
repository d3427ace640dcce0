"""What the user docs tell a newcomer to run: the service example runs the default model and shows
the headers it really answers with, installs name what exists, no tracker or diary words."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
# The docs a user reads (docs/history/ is the project's own record, by date, and may cite it).
USER_DOCS = [REPO / "README.md", REPO / "weights" / "README.md", REPO / "research" / "README.md",
             *sorted((REPO / "docs").glob("*.md"))]
SERVICE_EXAMPLES = [REPO / "README.md", REPO / "docs" / "service.md"]
DIARY = re.compile(r"\bissue \d+|\bissue's|\bthe issue\b|\bissue tracker|\bsessions?\b", re.I)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", SERVICE_EXAMPLES, ids=lambda p: p.name)
def test_the_service_example_runs_the_default_model(path: Path) -> None:
    from sr import AUTO_MODEL, DEFAULT_CHOICE
    from sr.commands import serve

    lines = [ln for ln in _text(path).splitlines() if ln.strip().startswith("sr serve ")]
    assert lines, f"no `sr serve` example in {path.name}"
    assert all("--model" not in ln for ln in lines[:1]), lines[0]  # the first one: the default
    import argparse

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    assert parser.parse_args([]).model is None and DEFAULT_CHOICE == AUTO_MODEL  # None: SR_MODEL or auto


@pytest.mark.parametrize("path", SERVICE_EXAMPLES, ids=lambda p: p.name)
def test_the_curl_example_shows_the_headers_the_default_model_answers_with(path: Path) -> None:
    """The comment under the curl: what auto makes of a JPEG of quality 85 (checked live on loopback
    when it was written; here through the same rule and name)."""
    from sr.inference.model_choice import choose
    from sr.lossy import inspect_compression

    m = re.search(r"for a JPEG of quality (\d+) the headers say  x-model: (\S+)  and  x-model-choice: (.+)$",
                  _text(path), re.M)
    assert m, f"no header comment under the curl in {path.name}"
    quality, model, described = int(m.group(1)), m.group(2), m.group(3).strip()
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (120, 90, 60)).save(buf, format="JPEG", quality=quality)
    choice = choose(inspect_compression(buf.getvalue()))
    assert choice.describe() == described
    assert model == f"{choice.model}-x2"  # scale=2 in the curl: the family's x2 file


def test_no_install_names_a_distribution_that_is_not_on_the_public_index() -> None:
    """sr-asa is not on PyPI: `pip install 'sr-asa[video]'` fails; extras come from a checkout or a wheel."""
    pattern = re.compile(r"""pip install ["']?sr-asa\b""")
    where = [str(p.relative_to(REPO)) for p in USER_DOCS if pattern.search(_text(p))]
    where += [str(p.relative_to(REPO)) for p in (REPO / "sr").rglob("*.py")
              if pattern.search(_text(p))]
    assert where == []


def test_user_docs_carry_no_tracker_or_diary_words() -> None:
    found = []
    for path in USER_DOCS:
        for number, line in enumerate(_text(path).splitlines(), 1):
            prose = re.sub(r"\]\([^)]*\)", "]", line)  # link targets (history anchors) are not prose
            for m in DIARY.finditer(prose):
                found.append(f"{path.relative_to(REPO)}:{number}: {m.group(0)}")
    assert found == []


# A repository path anywhere in a line of the user docs (prose, code span or code block): `sr/...`,
# `tests/...`, `.ci/...` and the like, not when it is part of a longer path (`../shared/data/x`).
REPO_PATH = re.compile(r"(?<![\w./-])((?:sr|tests|research|benchmarks|docs|\.ci|weights|data)/[\w./-]*)")
# What follows a path that is a pattern, not a file: `weights/photo-x{2,3,4}`, `x$s`, `runs/*`, `<name>`.
PATTERN_NEXT = ("{", "*", "$", "<", "[")
# The scale placeholder of the docs' commands (`--scale S --model weights/asa-base-xS.safetensors`).
SCALE_PLACEHOLDER = re.compile(r"-xS\b")


def missing_repository_paths(text: str, root: Path = REPO) -> list[tuple[int, str]]:
    """(line number, path) for each repository path ``text`` names that does not exist under ``root``."""
    missing = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in REPO_PATH.finditer(line):
            if line[m.end():m.end() + 1] in PATTERN_NEXT:
                continue
            named = m.group(1).rstrip(".")  # a full stop ends the sentence, not the name
            if not (root / SCALE_PLACEHOLDER.sub("-x2", named)).exists():
                missing.append((number, named))
    return missing


def test_every_repository_path_the_user_docs_name_exists() -> None:
    """A file the docs send a reader to (a fixture, a script, a module) is still there after a move."""
    missing = [f"{path.relative_to(REPO)}:{number}: {named}"
               for path in USER_DOCS for number, named in missing_repository_paths(_text(path))]
    assert missing == []


def test_a_moved_or_misspelt_path_is_found_in_prose_spans_and_blocks() -> None:
    text = ("See tests/conftest.py and `sr/cli.py`.\n"
            "The fixture is in tests/no_such_folder/conftest.py.\n"
            "```\npython -m pytest tests/no_such_test.py\n```\n"
            "`weights/asa-base-x{2,3,4}.safetensors`, `--model weights/asa-base-xS.safetensors`, "
            "../shared/datasets/sr/gone.py\n"
            "`sr/weights.py`, the module sr/inference/ and sr/nowhere/.\n")
    assert missing_repository_paths(text) == [
        (2, "tests/no_such_folder/conftest.py"), (4, "tests/no_such_test.py"), (7, "sr/nowhere/")]


def _ruff_commands(text: str) -> list[list[str]]:
    """Each `ruff check ...` in ``text`` (a code span or a line of a code block), as its words."""
    found = re.findall(r"`(ruff check[^`]*)`", text)
    found += [ln.strip() for ln in text.splitlines() if ln.strip().startswith("ruff check")]
    return [cmd.split() for cmd in found]


def test_the_documented_lint_command_is_the_one_ci_runs_on_folders_that_exist() -> None:
    documented = [cmd for path in USER_DOCS for cmd in _ruff_commands(_text(path))]
    assert documented, "no lint command in the user docs"
    ci = _ruff_commands(_text(REPO / ".ci" / "run"))
    for cmd in documented:
        targets = [word for word in cmd[2:] if not word.startswith("-")]
        assert targets and all((REPO / t).exists() for t in targets), " ".join(cmd)
        assert cmd in ci, f"docs say {' '.join(cmd)!r}, .ci/run runs {[' '.join(c) for c in ci]}"
