"""The Stop control of a supervised benchmark job (ui.components.stop_control), as the benchmark run and the
sweep panels draw it: the button asks first, Cancel does nothing, Yes stops the process as the session's
user and says so, a refusal is shown; the button is disabled while the session may not control."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from streamlit.testing.v1 import AppTest

import ui.components


@dataclass
class Spec:
    stop_grace_s: float = 30.0


@dataclass
class View:
    name: str
    live: bool = True
    spec: Spec = field(default_factory=Spec)


@dataclass
class FakeRuntime:
    refuse: str = ""
    stops: list = field(default_factory=list)

    def stop(self, name, *, actor, source):
        if self.refuse:
            raise RuntimeError(self.refuse)
        self.stops.append((name, actor, source))


def _panel(which: str, rt, view) -> None:
    import ui.bench.run
    import ui.bench.sweep

    (ui.bench.run if which == "bench" else ui.bench.sweep)._stop(rt, view)


PAGES = [  # the panel, its keys' prefix, the button's label, the question's words, the toast
    ("bench", "bench", "Stop", "The load being measured is abandoned; results already stored stay. After 30 s it "
                               "gets SIGKILL.", "Stop of bench-1 requested"),
    ("sweep", "sweep", "Stop the sweep", "Results stored so far stay. It restores the server's original "
                                         "configuration before it exits (SIGKILL after 30 s)", "Stop: requested"),
]


@pytest.fixture
def lock(monkeypatch):
    why = {"text": ""}
    monkeypatch.setattr(ui.components, "control_lock", lambda rt: why["text"])
    monkeypatch.setattr(ui.components, "actor", lambda: "alice")
    return why


@pytest.mark.parametrize("which, key, label, question, toast", PAGES)
def test_stop_asks_first_then_stops_as_the_sessions_user(lock, which, key, label, question, toast):
    rt = FakeRuntime()
    at = AppTest.from_function(_panel, args=(which, rt, View("bench-1")), default_timeout=30).run()
    assert not at.exception, at.exception
    button = at.button(key=f"{key}-stop")
    assert button.label == label and not button.disabled
    button.click().run()
    assert rt.stops == [] and any(question in w.value for w in at.warning)  # asked, nothing stopped yet
    at.button(key=f"{key}-confirm-stop-no").click().run()
    assert rt.stops == [] and not at.warning  # cancelled: the question goes away
    at.button(key=f"{key}-stop").click().run()
    at.button(key=f"{key}-confirm-stop-yes").click().run()
    assert not at.exception, at.exception
    assert rt.stops == [("bench-1", "alice", "dashboard")]
    assert [t.value for t in at.toast] == [toast] and not at.warning


@pytest.mark.parametrize("which, key, label, question, toast", PAGES)
def test_a_refused_stop_says_why(lock, which, key, label, question, toast):
    rt = FakeRuntime(refuse="not allowed")
    at = AppTest.from_function(_panel, args=(which, rt, View("bench-1")), default_timeout=30).run()
    at.button(key=f"{key}-stop").click().run()
    at.button(key=f"{key}-confirm-stop-yes").click().run()
    assert [e.value for e in at.error] == ["Could not stop bench-1: not allowed"] and not at.toast


@pytest.mark.parametrize("which, key, label, question, toast", PAGES)
def test_the_button_is_disabled_for_a_session_that_may_not_control(lock, which, key, label, question, toast):
    lock["text"] = "sign in as an operator to control"
    at = AppTest.from_function(_panel, args=(which, FakeRuntime(), View("bench-1")), default_timeout=30).run()
    button = at.button(key=f"{key}-stop")
    assert button.disabled and button.help == "sign in as an operator to control"


def test_a_benchmark_that_ended_offers_no_stop(lock):
    at = AppTest.from_function(_panel, args=("bench", FakeRuntime(), View("bench-1", live=False)),
                               default_timeout=30).run()
    assert at.button(key="bench-stop").disabled
    at = AppTest.from_function(_panel, args=("bench", FakeRuntime(), None), default_timeout=30).run()
    assert not at.button  # nothing supervised to stop
