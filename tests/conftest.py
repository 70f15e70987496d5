"""Shared fixtures: an isolated home so nothing touches ~/.specdeck."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


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
