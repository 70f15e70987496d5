"""The alerts panel (ui.components.alerts_panel): active alerts with what to do and a link, Acknowledge
and Mute that change the list at once and are audited, and the test notification; disabled while the
session may not control."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from streamlit.testing.v1 import AppTest

import ui.components
from backend.alerts.engine import AlertEngine
from backend.alerts.model import DiskState, ServerState, Snapshot
from backend.alerts.notify import Delivery, Notifier
from state import Store

GIB = 1024 ** 3


class FakeNotifier(Notifier):
    def __init__(self):
        super().__init__("http://127.0.0.1:9/hook")
        self.sent = []

    def send(self, msg, *, key=None, limited=True):
        self.sent.append(msg.text)
        return [Delivery(f"webhook {self.webhook}", True, "HTTP 200")]


@dataclass
class FakeRuntime:
    alerts: AlertEngine
    done: list = field(default_factory=list)

    def authorise(self, actor, action, name, source):
        return "alice", "local"

    def act(self, action, target, fn, *, actor, source):
        ok, message = fn()
        self.done.append((action, target, ok, message))
        return ok, message


def _panel(rt) -> None:
    import ui.components

    ui.components.alerts_panel(rt)


@pytest.fixture
def rt(tmp_path, monkeypatch):
    lock = {"text": ""}
    monkeypatch.setattr(ui.components, "control_lock", lambda rt: lock["text"])
    monkeypatch.setattr(ui.components, "actor", lambda: "caller")
    with Store(tmp_path / "state.db") as store:
        eng = AlertEngine(store, notifier=FakeNotifier())
        eng.evaluate(Snapshot(1e9, servers=(ServerState("glm5", "FATAL", exit_code=1),),
                              disks=(DiskState("/o", 3 * GIB, 100 * GIB),)))
        fake = FakeRuntime(eng)
        fake.lock = lock
        yield fake


def _run(rt) -> AppTest:
    at = AppTest.from_function(_panel, args=(rt,), default_timeout=30).run()
    assert not at.exception, at.exception
    return at


def test_lists_acknowledges_and_mutes(rt):
    at = _run(rt)
    assert [e.value.split("**")[1] for e in at.error] == ["glm5: server down (FATAL with exit code 1)"]
    assert "[open](/servers?server=glm5)" in at.error[0].value and "Read the server's log" in at.error[0].value
    assert len(at.warning) == 1 and "[open](/gpus)" in at.warning[0].value
    down = rt.alerts.alerts.active()[0]
    at.button(key=f"alerts-ack-{down.id}").click().run()
    assert not at.error and len(at.warning) == 1  # gone at once
    assert rt.alerts.alerts.get(down.id).acked_by == "alice"
    assert rt.done[-1][:3] == ("alert-ack", f"#{down.id}", True)
    disk = rt.alerts.alerts.active()[1]
    at.button(key=f"alerts-mute-{disk.id}").click().run()
    assert not at.warning and "No active alerts." in [c.value for c in at.caption]
    assert [m.target for m in rt.alerts.alerts.mutes()] == ["disk-full"]


def test_test_notification_and_the_lock(rt):
    at = _run(rt)
    assert "Notifications: webhook http://127.0.0.1:9/hook" in [c.value for c in at.caption]
    at.button(key="alerts-test").click().run()
    assert rt.alerts.notifier.sent[-1].startswith("[TEST] ")  # after the two alerts fired in the fixture
    assert rt.done[-1] == ("alert-test", "notifications", True, "webhook http://127.0.0.1:9/hook: sent (HTTP 200)")
    rt.lock["text"] = "sign in to control"
    at = _run(rt)
    assert all(b.disabled for b in at.button)
