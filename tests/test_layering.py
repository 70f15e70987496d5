"""backend/ and state/ are plain Python: none of their modules imports streamlit."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("backend", "state")


def streamlit_imports(source: str, filename: str = "<string>") -> list[int]:
    """Line numbers of every import of streamlit (or a submodule) in ``source``."""
    lines = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            if any(a.name == "streamlit" or a.name.startswith("streamlit.") for a in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 0 and (mod == "streamlit" or mod.startswith("streamlit.")):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            # importlib.import_module("streamlit") / __import__("streamlit")
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split(".")[0] == "streamlit":
                    lines.append(node.lineno)
    return lines


def layer_files() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (REPO / layer).rglob("*.py"))


def test_layers_have_python_files():
    names = {p.relative_to(REPO).parts[0] for p in layer_files()}
    assert names == set(LAYERS)


@pytest.mark.parametrize("path", layer_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_streamlit_import(path: Path):
    found = streamlit_imports(path.read_text(encoding="utf-8"), str(path))
    assert not found, f"{path.relative_to(REPO)} imports streamlit at line(s) {found}; backend/ and state/ must not"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import streamlit as st", [1]),
        ("import os\nfrom streamlit import session_state", [2]),
        ("import streamlit.components.v1", [1]),
        ("def f():\n    import streamlit\n", [2]),
        ("import importlib\nimportlib.import_module('streamlit')", [2]),
        ("import streamlit_extras", []),
        ("from . import streamlit", []),  # a local module of that name
        ("x = 'import streamlit'", []),
    ],
)
def test_detector(source, expected):
    assert streamlit_imports(source) == expected
