"""The dashboard freezes what start-up allocated once per process (so Streamlit's collection after every
script run skips it), and never under AppTest, whose runtime is a stand-in."""

from __future__ import annotations

from unittest import mock

import pytest
from streamlit import runtime as st_runtime

from ui import context


@pytest.fixture
def fresh(monkeypatch):
    frozen = []
    monkeypatch.setattr(context, "_frozen", False)
    monkeypatch.setattr(context.gcpin, "_enabled", False)  # restored after the test: pins stay off in this process
    monkeypatch.setattr(context.gc, "freeze", lambda: frozen.append(1))
    monkeypatch.setattr(context.gc, "collect", lambda *a: 0)
    return frozen


def test_a_dashboard_process_freezes_once(fresh, monkeypatch):
    monkeypatch.setattr(st_runtime, "exists", lambda: True)
    monkeypatch.setattr(st_runtime, "get_instance", lambda: mock.MagicMock(spec=st_runtime.Runtime))
    assert context.freeze_startup() is True
    assert context.freeze_startup() is False  # the next runs leave it
    assert fresh == [1]
    assert context.gcpin._enabled  # the Training page's readers pin from now on


def test_not_without_a_dashboard_or_under_apptest(fresh, monkeypatch):
    monkeypatch.setattr(st_runtime, "exists", lambda: False)
    assert context.freeze_startup() is False
    monkeypatch.setattr(st_runtime, "exists", lambda: True)
    monkeypatch.setattr(st_runtime, "get_instance", lambda: mock.MagicMock())  # AppTest's stand-in
    assert context.freeze_startup() is False
    assert fresh == [] and not context.gcpin._enabled
