"""Notifications reach a real webhook receiver (http.server on 127.0.0.1) and a real command."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from backend.alerts.engine import AlertEngine
from backend.alerts.model import ServerState, Snapshot
from backend.alerts.notify import Message, Notifier, RateLimit, run_command, send_webhook
from state import Store

T0 = 1_800_000_000.0


@pytest.fixture
def receiver():
    got: list[tuple[str, dict, dict]] = []
    status = [200]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, dict(self.headers), json.loads(body)))
            self.send_response(status[0])
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/services/T0/B0/x", got, status
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_webhook_gets_slack_json(receiver):
    url, got, _ = receiver
    d = send_webhook(url, Message("[ERROR] glm5: server down\nWhat to do: read the log\n/servers?server=glm5"))
    assert d.ok and d.detail == "HTTP 200"
    path, headers, body = got[0]
    assert path == "/services/T0/B0/x" and headers["Content-Type"] == "application/json"
    assert body == {"text": "[ERROR] glm5: server down\nWhat to do: read the log\n/servers?server=glm5"}


def test_webhook_failures_are_reported(receiver):
    url, _, status = receiver
    status[0] = 500
    d = send_webhook(url, Message("x"))
    assert not d.ok and d.detail.startswith("HTTP 500")
    srv_gone = send_webhook("http://127.0.0.1:9/none", Message("x"), timeout_s=2)
    assert not srv_gone.ok and srv_gone.detail.startswith("not sent:")


def test_engine_alert_reaches_the_webhook_with_a_full_link(tmp_path, receiver):
    url, got, _ = receiver
    with Store(tmp_path / "state.db") as store:
        eng = AlertEngine(store, notifier=Notifier(url), base_url="http://gpu-box:8501/", workspace="lab")
        eng.evaluate(Snapshot(T0, servers=(ServerState("glm5", "FATAL", exit_code=3),)))
        text = got[0][2]["text"]
        assert text.startswith("[ERROR] lab: glm5: server down (FATAL with exit code 3)")
        assert text.endswith("http://gpu-box:8501/servers?server=glm5")
        assert eng.alerts.active()[0].notified_at == T0


def test_command_gets_the_message_on_stdin_and_in_its_environment(tmp_path):
    out = tmp_path / "got.json"
    script = ("import json, os, sys; json.dump({'stdin': sys.stdin.read(), 'rule': os.environ['SPECDECK_ALERT_RULE'],"
              " 'link': os.environ['SPECDECK_ALERT_LINK'], 'argv': sys.argv[1:]}, open(sys.argv[1], 'w'))")
    argv = [sys.executable, "-c", script, str(out), "$HOME; rm -rf /"]  # a shell would expand and run this
    d = run_command(argv, Message("disk nearly full", "warning", "disk-full", "/o", "/gpus"))
    assert d.ok, d.detail
    got = json.loads(out.read_text())
    assert got == {"stdin": "disk nearly full\n", "rule": "disk-full", "link": "/gpus",
                   "argv": [str(out), "$HOME; rm -rf /"]}


def test_command_failures_are_reported(tmp_path):
    bad = run_command([sys.executable, "-c", "import sys; sys.stderr.write('no token\\n'); sys.exit(4)"], Message("x"))
    assert not bad.ok and bad.detail == "exit code 4: no token"
    missing = run_command([str(tmp_path / "nope")], Message("x"))
    assert not missing.ok and missing.detail.startswith("could not run:")
    slow = run_command([sys.executable, "-c", "import time; time.sleep(30)"], Message("x"), timeout_s=0.5)
    assert not slow.ok and "still running" in slow.detail


def test_notifier_rate_limit_and_test_bypass(receiver):
    url, got, _ = receiver
    n = Notifier(url, limit=RateLimit(max_per_hour=1))
    assert n.send(Message("one"), key="a")[0].ok
    assert n.send(Message("two"), key="b") == []  # over the hour's limit
    assert n.send(Message("test"), limited=False)[0].ok  # a test always goes out
    assert [b["text"] for _, _, b in got] == ["one", "test"]
    assert Notifier().send(Message("nowhere")) == [] and not Notifier().configured
