"""Pages reach control actions only through the runtime, which checks who asks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTROL = {"start", "stop", "restart", "launch", "stop_all"}


def bypasses(source: str) -> list[str]:
    """Calls like ``fleet.launch(...)`` or ``rt.supervisor.stop(...)``: a control method on
    anything but the runtime object ``rt`` (``st.stop()`` ends a script run, not a process)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CONTROL:
            owner = node.func.value
            if not (isinstance(owner, ast.Name) and owner.id in ("rt", "st")):
                found.append(f"line {node.lineno}: {ast.unparse(node.func)}")
    return found


@pytest.mark.parametrize("path", sorted((REPO / "app_pages").glob("*.py")) + [REPO / "app.py"],
                         ids=lambda p: p.name)
def test_pages_control_only_through_the_runtime(path):
    assert bypasses(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("source, expected", [
    ("rt.stop(n, actor=a, source='dashboard')", []),
    ("fleet.launch(n, cfg, actor=a)", ["line 1: fleet.launch"]),
    ("rt.supervisor.stop(n)", ["line 1: rt.supervisor.stop"]),
    ("sup.restart(n)", ["line 1: sup.restart"]),
    ("timer.start_time()", []),
    ("st.stop()", []),
])
def test_detector(source, expected):
    assert bypasses(source) == expected
