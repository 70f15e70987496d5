from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def fixture_path():
    def get(name: str) -> Path:
        return FIXTURES / name

    return get
