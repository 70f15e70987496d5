"""``python -m backend.cli alerts ...`` in process, against a workspace written by the test."""

from __future__ import annotations

import io
import json
import sys
import textwrap

import pytest

from backend.alerts.engine import AlertEngine
from backend.alerts.model import DiskState, ServerState, Snapshot
from backend.cli import COMMANDS, main
from state import Store
from tests.alerts.test_notify import receiver  # noqa: F401 (fixture)

T0 = 1_800_000_000.0


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(argv), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def write_ws(root, alerts: str = ""):
    root.mkdir(parents=True, exist_ok=True)
    (root / "specdeck.toml").write_text(textwrap.dedent("""
        [workspace]
        name = "alertws"
    """) + alerts)
    return root


def fire(root):
    with Store(root / "state.db") as store:
        eng = AlertEngine(store)
        eng.evaluate(Snapshot(T0, servers=(ServerState("glm5", "FATAL", exit_code=1),),
                              disks=(DiskState("/o", 3 * 1024 ** 3, 100 * 1024 ** 3),)))
        eng.evaluate(Snapshot(T0 + 60, disks=(DiskState("/o", 3 * 1024 ** 3, 100 * 1024 ** 3),)))


def test_alerts_is_a_command():
    assert COMMANDS["alerts"] == "backend.cli.alerts"


def test_list_active_all_and_json(tmp_path):
    root = write_ws(tmp_path / "ws")
    rc, out, _ = run("-w", str(root), "alerts", "list")
    assert rc == 0 and out.startswith("no active alerts")
    fire(root)
    rc, out, _ = run("-w", str(root), "alerts", "list")
    assert rc == 0 and "disk-full:/o" in out and "glm5" not in out  # the server alert cleared
    assert "WARNING ACTIVE" in out and "what to do:" in out and "link: /gpus" in out
    rc, out, _ = run("-w", str(root), "alerts", "list", "--all", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    # newest first: both fired at once, the error (evaluated first) has the lower id
    assert [(r["rule"], r["status"]) for r in rows] == [("disk-full", "active"), ("server-down", "cleared")]
    down = next(r for r in rows if r["rule"] == "server-down")
    assert down["cleared_at"] == T0 + 60 and down["link"] == "/servers?server=glm5" and down["severity"] == "error"


def test_ack_and_unknown_id(tmp_path):
    root = write_ws(tmp_path / "ws")
    fire(root)
    rc, out, _ = run("-w", str(root), "alerts", "list", "--json")
    alert_id = json.loads(out.splitlines()[0])["id"]
    rc, out, err = run("-w", str(root), "alerts", "ack", str(alert_id))
    assert rc == 0 and f"#{alert_id} acknowledged by" in out
    rc, out, _ = run("-w", str(root), "alerts", "list", "--json")
    assert json.loads(out.splitlines()[0])["status"] == "acked"
    rc, out, err = run("-w", str(root), "alerts", "ack", "4242")
    assert rc == 1 and "no alert #4242" in err and "alerts list --all" in err


def test_mute_and_unmute(tmp_path):
    root = write_ws(tmp_path / "ws")
    fire(root)
    rc, out, _ = run("-w", str(root), "alerts", "mute", "disk-full", "--hours", "2")
    assert rc == 0 and out.startswith("disk-full muted until")
    rc, out, _ = run("-w", str(root), "alerts", "list", "--json")
    assert json.loads(out.splitlines()[0])["status"] == "muted"
    assert run("-w", str(root), "alerts", "unmute", "disk-full")[0] == 0
    rc, _, err = run("-w", str(root), "alerts", "unmute", "disk-full")
    assert rc == 1 and "not muted" in err
    rc, _, err = run("-w", str(root), "alerts", "mute", "disk-full", "--hours", "0")
    assert rc == 2 and "--hours 0" in err


def test_notify_test_reaches_webhook_and_command(tmp_path, receiver):  # noqa: F811
    url, got, status = receiver
    marker = tmp_path / "ran"
    argv = [sys.executable, "-c", f"import sys; open({str(marker)!r}, 'w').write(sys.stdin.read())"]
    root = write_ws(tmp_path / "ws", f"\n[alerts]\nwebhook = {json.dumps(url)}\ncommand = {json.dumps(argv)}\n")
    rc, out, err = run("-w", str(root), "alerts", "notify-test")
    assert rc == 0, err
    assert f"webhook {url}: sent (HTTP 200)" in out and "sent (exit code 0)" in out
    assert got[0][2]["text"].startswith("[TEST] alertws: Specdeck alerts reach this channel")
    assert marker.read_text().startswith("[TEST] alertws:")
    status[0] = 503
    rc, out, _ = run("-w", str(root), "alerts", "notify-test")
    assert rc == 1 and "FAILED (HTTP 503" in out


def test_notify_test_without_channels_and_bad_config(tmp_path):
    root = write_ws(tmp_path / "ws")
    rc, _, err = run("-w", str(root), "alerts", "notify-test")
    assert rc == 1 and "[alerts] has neither webhook" in err and "specdeck.toml" in err
    bad = write_ws(tmp_path / "bad", '\n[alerts]\nwebhook = "slack.example/hook"\nstall_s = 1\n')
    rc, _, err = run("-w", str(bad), "alerts", "list")
    assert rc == 2
    assert "specdeck.toml:6: alerts.webhook:" in err and "http:// or https:// URL" in err
    assert "specdeck.toml:7: alerts.stall_s:" in err
