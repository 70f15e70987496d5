"""A broken import of the project's own code fails the suite; it never turns into a skip. Only an
optional outside dependency may skip a test (pytest.importorskip)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OWN = {p.name for p in REPO.iterdir() if p.is_dir() and any(p.glob("*.py"))} | {"app"}


def own_importorskips(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """(line, module) of each importorskip of a module of this project in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        arg = node.args[0]
        if name == "importorskip" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            if arg.value.split(".")[0] in OWN:
                found.append((node.lineno, arg.value))
    return found


def test_the_project_packages_are_known():
    assert {"backend", "state", "ui", "tests", "perf"} <= OWN


@pytest.mark.parametrize("source, expected", [
    ("import pytest\npytest.importorskip('backend.sim.server')", [(2, "backend.sim.server")]),
    ("from pytest import importorskip\nimportorskip('state.store')", [(2, "state.store")]),
    ("import pytest\npytest.importorskip('playwright.sync_api')", []),
])
def test_the_scan_finds_own_modules_only(source, expected):
    assert own_importorskips(source) == expected


def test_no_test_skips_on_the_projects_own_import():
    found = {str(p.relative_to(REPO)): hits for p in sorted((REPO / "tests").rglob("*.py"))
             if (hits := own_importorskips(p.read_text(encoding="utf-8"), str(p)))}
    assert not found, f"importorskip of the project's own modules (import them plainly): {found}"
