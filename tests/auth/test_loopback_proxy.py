"""On loopback, what makes a session local: the TCP peer, forwarding headers and the dashboard's
token, never Host.

A real `streamlit run` on 127.0.0.1; raw websocket sessions from this host
with and without the token and the headers a reverse proxy adds.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.e2e.netns_ws_client import Session
from tests.e2e._dashboard import serve

REPO = Path(__file__).resolve().parents[2]
TOKEN = "loopback-test-token-0123456789"


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loopback")
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text('[workspace]\nname = "loopback"\n\n[telemetry]\nsource = "fake"\n')
    r = subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(ws), "users", "add", "alice",
                        "--password-stdin"], cwd=REPO, input="alice-password-1\n", capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    with serve(tmp / "home", workspace=ws, timeout_s=90, token=TOKEN) as url:
        yield int(url.rsplit(":", 1)[1])


def _first_run(port: int, headers: dict[str, str], token: str | None = TOKEN) -> dict:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    with connect(f"ws://localhost:{port}/_stcore/stream", sock=sock, subprotocols=["streamlit"],
                 additional_headers=headers, open_timeout=60, max_size=None) as ws:
        s = Session(ws)
        s.query = f"token={token}" if token else ""
        run = s.run()
        run["text"] = "\n".join(run["text"])
        return run


@pytest.mark.timeout(240)
def test_a_direct_loopback_session_with_the_token_is_local(dashboard):
    run = _first_run(dashboard, {})
    assert "Workspace:" in run["text"] and "loopback" in run["text"]
    assert not any("Sign in to start" in a for a in run["alerts"])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_a_loopback_session_without_the_token_gets_the_token_page_only(dashboard, token):
    run = _first_run(dashboard, {}, token)
    assert run["headings"][:1] == ["Open Specdeck"]
    assert "Workspace:" not in run["text"] and "loopback" not in run["text"]


@pytest.mark.timeout(240)
def test_a_forwarded_client_is_not_local(dashboard):
    # uvicorn trusts X-Forwarded-For from a loopback peer: the session's peer is the forwarded client,
    # and the token does not make it local: it gets the sign-in page
    run = _first_run(dashboard, {"X-Forwarded-For": "203.0.113.9"})
    assert run["headings"][:1] == ["Sign in"] and "User name" in run["inputs"]
    assert "Workspace:" not in run["text"] and "loopback" not in run["text"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("header", ["X-Real-IP", "Forwarded"])
def test_any_forwarding_header_means_a_proxy_stands_between(dashboard, header):
    value = "for=203.0.113.9" if header == "Forwarded" else "203.0.113.9"
    run = _first_run(dashboard, {header: value})
    assert run["headings"][:1] == ["Sign in"] and "User name" in run["inputs"]
    assert "loopback" not in run["text"]
