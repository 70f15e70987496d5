"""Shared fixtures: an isolated home so nothing touches ~/.specdeck."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


# A pytest-xdist worker (scripts/test runs several): its own hundred ports for the demo workspaces
# its tests write (backend/flows/demo.py), so that two workers never give their demos the same port.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    os.environ["SPECDECK_DEMO_PORT_BASE"] = str(30200 + 100 * int(_WORKER[2:]))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """In an xdist worker (scripts/test: ``--dist loadgroup``): each module is one group, run by one
    worker, except that every ``browser`` test is in the one group ``browser`` (a Chromium and a
    dashboard at a time, never one per worker at once).  The browser group comes first, then the
    modules holding a ``slow`` test, so that the long ones start early and the short ones fill in
    around them."""
    if not hasattr(config, "workerinput"):
        return
    for item in items:
        if not any(item.iter_markers("xdist_group")):
            name = "browser" if item.get_closest_marker("browser") else item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(name))
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (not item.get_closest_marker("browser"), item.path not in slow))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("specdeck-home")
    monkeypatch.setenv("SPECDECK_HOME", str(home))
    monkeypatch.delenv("SPECDECK_WORKSPACE", raising=False)
    yield home


SERVE_PYTHON = REPO / ".venv-serve" / "bin" / "python"


@pytest.fixture(scope="session")
def serve_python() -> Path:
    """Python of the serving environment built from requirements-serve.txt (SGLang's own argument
    parser and benchmark client, on CPU). `scripts/test` builds it; SPECDECK_SERVE_PYTHON overrides.
    Missing: a failure under CI (which must cover this path), a skip elsewhere."""
    path = Path(os.environ.get("SPECDECK_SERVE_PYTHON") or SERVE_PYTHON)
    if not path.exists():
        msg = f"serving environment missing: {path} (scripts/test builds it from requirements-serve.txt)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path
