"""A live panel's timed run left over from the page the tab just left draws nothing (ui.auth): the browser
keeps the old page's timers until the next page's run has finished, and a panel drawn into the new page's
layout made the browser drop the session ("Bad delta path index")."""

from __future__ import annotations

from types import SimpleNamespace

import streamlit as st

import ui.auth as auth


def _run(monkeypatch, page: str, *, timed: bool):
    ctx = SimpleNamespace(page_script_hash=page, fragment_ids_this_run=["frag"] if timed else [])
    monkeypatch.setattr(auth, "get_script_run_ctx", lambda: ctx)


def test_a_timed_run_on_the_page_that_drew_the_panel_draws_and_one_from_another_page_does_not(monkeypatch):
    state: dict = {}
    monkeypatch.setattr(st, "session_state", state)
    _run(monkeypatch, "overview", timed=True)
    assert not auth._drawn_on_another_page("tile")  # never drawn in a full run yet: drawn as before
    _run(monkeypatch, "overview", timed=False)
    assert not auth._drawn_on_another_page("tile")  # a full run of the Overview draws it there
    _run(monkeypatch, "overview", timed=True)
    assert not auth._drawn_on_another_page("tile")
    _run(monkeypatch, "servers", timed=True)  # the tab moved to Servers; the Overview's timer fired
    assert auth._drawn_on_another_page("tile")
    assert not auth._drawn_on_another_page("chart")  # another panel is judged on its own
    _run(monkeypatch, "servers", timed=False)  # a panel of the same function drawn on Servers too
    assert not auth._drawn_on_another_page("tile")
    _run(monkeypatch, "servers", timed=True)
    assert not auth._drawn_on_another_page("tile")


def test_the_wrapped_panel_is_skipped_only_for_a_leftover_timed_run(monkeypatch):
    state: dict = {}
    monkeypatch.setattr(st, "session_state", state)
    monkeypatch.setattr(auth, "st", SimpleNamespace(session_state=state, rerun=st.rerun,
                                                    fragment=lambda f, run_every=None: f))
    monkeypatch.setattr(auth, "runtime", lambda gate=False: None)
    monkeypatch.setattr(auth, "access", lambda rt: SimpleNamespace(can_view=True))
    drawn: list[str] = []

    @auth.live_fragment(run_every=2)
    def tile(label: str) -> str:
        drawn.append(label)
        return label

    _run(monkeypatch, "overview", timed=False)
    assert tile("full") == "full"
    _run(monkeypatch, "overview", timed=True)
    assert tile("timed") == "timed"
    _run(monkeypatch, "servers", timed=True)
    assert tile("leftover") is None
    assert drawn == ["full", "timed"]
