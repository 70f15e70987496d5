"""The state store's faults show as a banner above every page (AppTest, real runtime)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.helpers import close_runtime

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "bannertest"

[[process]]
name = "idle"
argv = ["{sys.executable}", "-c", "pass"]
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _banners(at: AppTest) -> list[str]:
    return [e.value for e in at.error if "state store" in e.value]


def _frame(at_timeout: float = 60) -> AppTest:
    """The frame (app.py), which st.navigation runs before every page, with its first page."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=at_timeout)
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.timeout(120)
def test_frame_banner_while_the_store_cannot_be_written(workspace):
    rt = runtime_mod.get_runtime()
    assert not _banners(_frame())

    rt.store._conn.execute("PRAGMA query_only = 1")  # writes refused, as on an immutable file
    try:
        assert not rt.store.writable()
        shown = _banners(_frame())
        assert shown and "cannot be written" in shown[0] and "from memory" in shown[0]
        assert str(workspace / "state.db") in shown[0] and "writable again" in shown[0]
    finally:
        rt.store._conn.execute("PRAGMA query_only = 0")
    assert rt.store.recheck().ok
    assert not _banners(_frame())


@pytest.mark.timeout(120)
def test_frame_banner_when_the_store_is_found_damaged(workspace):
    rt = runtime_mod.get_runtime()
    from state.store import StoreCorrupt

    rt.store._mark(StoreCorrupt, "SQLite reports it damaged: database disk image is malformed")
    shown = _banners(_frame())
    assert shown and "damaged" in shown[0] and "move the damaged file aside" in shown[0]


@pytest.mark.timeout(120)
def test_a_page_that_meets_the_damaged_store_says_so_instead_of_an_exception(workspace, monkeypatch):
    rt = runtime_mod.get_runtime()
    from state.store import StoreCorrupt

    def damaged(*_a, **_k):
        raise StoreCorrupt(workspace / "state.db", "SQLite's quick_check finds it damaged: database disk image "
                           "is malformed", "Restore the newest backup")

    monkeypatch.setattr(rt.fleet, "names", damaged)
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    said = [e.value for e in at.error if e.value.startswith("This page could not read the state store")]
    assert said and "database disk image is malformed" in said[0]
