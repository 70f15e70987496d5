"""Shared fixtures: an isolated home so nothing touches ~/.specdeck."""

from __future__ import annotations

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
