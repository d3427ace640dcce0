"""Small modules with one idea each: no module of sr/ over 500 lines, no class over 15 methods
(properties and dunders aside). The offenders of the day are listed with their size, which they may
not outgrow; a new offender fails, and so does a listed one that is back under the limits (remove
its entry then)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 500
MAX_CLASS_METHODS = 15

# "path" (a module's lines) or "path:Class" (its methods) -> the size it has now and may not exceed.
KNOWN_OFFENDERS: dict[str, int] = {}

_PROPERTY_DECORATORS = {"property", "cached_property", "setter", "getter", "deleter"}


def _decorator_name(node: ast.expr) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def method_count(cls: ast.ClassDef) -> int:
    """Functions defined in ``cls``'s own body, less dunders and properties (with their setters)."""
    return sum(1 for node in cls.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               and not (node.name.startswith("__") and node.name.endswith("__"))
               and not _PROPERTY_DECORATORS & {_decorator_name(d) for d in node.decorator_list})


def oversized(root: Path, package: str = "sr") -> dict[str, int]:
    """Every module of ``root/package`` over MAX_MODULE_LINES and class over MAX_CLASS_METHODS."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        name = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            found[name] = lines
        for node in ast.walk(ast.parse(text, filename=name)):
            if isinstance(node, ast.ClassDef) and (count := method_count(node)) > MAX_CLASS_METHODS:
                found[f"{name}:{node.name}"] = count
    return found


def test_no_new_module_or_class_outgrows_the_limits() -> None:
    found = oversized(REPO)
    new = {k: v for k, v in found.items() if k not in KNOWN_OFFENDERS}
    grown = {k: (KNOWN_OFFENDERS[k], v) for k, v in found.items() if v > KNOWN_OFFENDERS.get(k, v)}
    assert new == {}, f"over {MAX_MODULE_LINES} lines or {MAX_CLASS_METHODS} methods: split them"
    assert grown == {}, "listed offenders grew (listed size, now): split them"


def test_a_listed_offender_that_is_back_under_the_limits_is_removed_from_the_list() -> None:
    fixed = sorted(set(KNOWN_OFFENDERS) - set(oversized(REPO)))
    assert fixed == [], "within the limits now: remove these entries from KNOWN_OFFENDERS"


def test_long_modules_and_classes_with_many_methods_are_found(tmp_path: Path) -> None:
    pkg = tmp_path / "sr"
    pkg.mkdir()
    methods = "".join(f"    def m{i}(self):\n        return {i}\n" for i in range(MAX_CLASS_METHODS))
    extras = ("    @property\n    def p(self):\n        return 0\n"
              "    @p.setter\n    def p(self, v):\n        pass\n"
              "    def __len__(self):\n        return 0\n")
    (pkg / "ok.py").write_text(f"class Fits:\n{methods}{extras}")
    one_more = "    @staticmethod\n    def one_more():\n        pass\n"
    (pkg / "big.py").write_text(f"class Over:\n{methods}{one_more}" + "\n" * MAX_MODULE_LINES)
    lines = 1 + 2 * MAX_CLASS_METHODS + 3 + MAX_MODULE_LINES
    assert oversized(tmp_path) == {"sr/big.py": lines, "sr/big.py:Over": MAX_CLASS_METHODS + 1}
