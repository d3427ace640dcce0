"""benchmarks.tooling: the helpers the benchmarks and research scripts share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.tooling import comma_choices, set_threads, write_json
from sr.errors import CLIError


def test_comma_choices_keeps_order_and_names_the_unknown() -> None:
    assert comma_choices(" b, a ,", ("a", "b", "c"), "kind") == ["b", "a"]
    with pytest.raises(CLIError, match="unknown kind x, y; choose from a, b"):
        comma_choices("a,x,y", ("a", "b"), "kind")
    with pytest.raises(CLIError, match=r"\(none\)"):
        comma_choices(" , ", ("a",), "kind")


def test_write_json_is_whole_or_a_one_line_error(tmp_path: Path) -> None:
    write_json(str(tmp_path / "r.json"), {"x": 1})
    assert json.loads((tmp_path / "r.json").read_text()) == {"x": 1}
    with pytest.raises(CLIError, match="does not exist"):
        write_json(str(tmp_path / "missing" / "r.json"), {})
    with pytest.raises(CLIError, match="is a folder"):
        write_json(str(tmp_path), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_set_threads_refuses_negative_counts() -> None:
    with pytest.raises(CLIError, match=">= 0"):
        set_threads(-1)
    set_threads(0)  # torch's own choice: nothing changes
