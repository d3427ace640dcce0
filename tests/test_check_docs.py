""".ci/check-docs: the link and anchor check that CI runs on the Markdown files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = Path(__file__).resolve().parent.parent / ".ci" / "check-docs"


def check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True, timeout=60)


def test_the_project_docs_have_no_broken_links() -> None:
    proc = check(CHECK.parent.parent)
    assert proc.returncode == 0, proc.stderr


def test_broken_files_and_anchors_are_found_and_good_ones_pass(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# Title\n\n## `sr bench` (load test)\n\n## Twice\n\n## Twice\n\n<a id=\"kept\"></a>\n"
        "```\n[not a link](nowhere.md)\n```\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md#sr-bench-load-test) [ok](docs/a.md#twice-1) [ok](docs/a.md#kept) "
        "[web](https://example.org/x#y) [ok](#readme-anchor)\n\n# README anchor\n")
    assert check(tmp_path).returncode == 0, check(tmp_path).stderr
    (tmp_path / "docs" / "b.md").write_text("[gone](missing.md) [bad](a.md#no-such-heading)\n")
    proc = check(tmp_path)
    assert proc.returncode == 1
    assert "docs/b.md:1: missing.md: no such file" in proc.stderr
    assert "#no-such-heading" in proc.stderr and proc.stderr.count("\n") == 2
