"""sr.io's public names: listed once (the imports in sr/io/__init__.pyi), each loaded on first use."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import sr.io


def _listed() -> dict[str, str]:
    """name -> submodule, as sr/io/__init__.pyi imports them."""
    stub = ast.parse((Path(sr.io.__file__).parent / "__init__.pyi").read_text())
    return {alias.name: node.module for node in stub.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}


def test_each_listed_name_is_its_submodules_own_object():
    listed = _listed()
    assert len(listed) > 40 and sorted(sr.io.__all__) == sorted(listed)
    for name, module in listed.items():
        assert getattr(sr.io, name) is getattr(importlib.import_module(f"sr.io.{module}"), name), name
    assert set(listed) <= set(dir(sr.io))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        sr.io.no_such_name  # noqa: B018


def test_importing_sr_io_and_its_format_table_loads_neither_numpy_nor_pillow():
    code = ("import sys, sr.io\n"
            "sr.io.FORMATS, sr.io.output_choices(), sr.io.DEFAULT_MAX_PIXELS\n"
            "print(sorted(m for m in ('numpy', 'PIL') if m in sys.modules))\n"
            "sr.io.read_image\n"
            "print(sorted(m for m in ('numpy', 'PIL') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "['PIL', 'numpy']"]  # the decoder brings them when used
