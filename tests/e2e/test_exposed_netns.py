"""The dashboard reachable from the network, tried from a non-loopback address.

The test makes its own network namespace and veth pair: the dashboard listens
on this host's end (10.213.N.1), and Chromium and a raw websocket client run
inside the namespace (10.213.N.2), so Streamlit sees a real non-loopback TCP
peer.  The raw client sends ``Host: localhost``; that must not make it local.
Needs root and ``ip netns`` (CI runs as root); elsewhere it skips and says why.
"""

from __future__ import annotations

import json
import os
import queue
import random
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from state import Store, audit
from tests.e2e._dashboard import serve

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "artifacts" / "screenshots"
PASSWORD = "alice-password-1"
BANNER = "Sign in to start, stop or relaunch"

pytestmark = pytest.mark.browser


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"network namespace test cannot run in CI: {reason}")
    pytest.skip(f"network namespace test skipped: {reason}")


@pytest.fixture
def netns():
    """(namespace name, host address, namespace address) on a fresh veth pair; removed afterwards."""
    if os.geteuid() != 0:
        _unavailable("it needs root to create a network namespace (ip netns add)")
    if shutil.which("ip") is None:
        _unavailable("the `ip` command (iproute2) is missing")
    used = _ip("-o", "-4", "addr", "show").stdout
    free = [n for n in range(256) if f" 10.213.{n}." not in used]
    if not free:
        _unavailable("every 10.213.N.0/24 subnet is taken on this host")
    n = random.choice(free)
    tag = f"{os.getpid() % 100000}{n}"
    ns, host_if, ns_if = f"specdeck-{tag}", f"sdh{tag}"[:15], f"sdn{tag}"[:15]
    host_ip, ns_ip = f"10.213.{n}.1", f"10.213.{n}.2"
    try:
        _ip("netns", "add", ns)
    except subprocess.CalledProcessError as exc:
        _unavailable(f"`ip netns add` failed: {exc.stderr.strip()}")
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{host_ip}/24", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/24", "dev", ns_if)
        _ip("netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield ns, host_ip, ns_ip
    finally:
        _ip("link", "del", host_if, check=False)  # removes both ends
        _ip("netns", "del", ns, check=False)
    assert ns not in _ip("netns", "list").stdout


def _cli(ws: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(ws), *args], cwd=REPO,
                          input=stdin, capture_output=True, text=True, timeout=120)


def _ticker_state(ws: Path) -> str:
    r = _cli(ws, "processes", "list", "--json")
    assert r.returncode == 0, r.stderr
    return {p["name"]: p["state"] for p in json.loads(r.stdout)}["ticker"]


def _wait_ticker(ws: Path, state: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while (got := _ticker_state(ws)) != state:
        assert time.time() < deadline, f"ticker stayed {got}, wanted {state}"
        time.sleep(0.5)


@contextmanager
def _dashboard(tmp: Path, host_ip: str):
    """`streamlit run app.py --server.address HOST_IP` on a workspace with a ticker and user alice."""
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(f"""
[workspace]
name = "exposed"

[telemetry]
source = "fake"

[[process]]
name = "ticker"
argv = ["{sys.executable}", "-m", "backend.demo", "ticker", "--interval", "0.5"]
cwd = "{REPO}"
autostart = true
stop_grace_s = 5
""")
    r = _cli(ws, "users", "add", "alice", "--password-stdin", stdin=PASSWORD + "\n")
    assert r.returncode == 0, r.stderr
    # browsers reach it by this address: let Streamlit's Host check accept it (as a deployment would)
    hosts = ("--server.allowedHosts", "localhost", "--server.allowedHosts", "127.0.0.1",
             "--server.allowedHosts", host_ip)
    with serve(tmp / "home", workspace=ws, timeout_s=90, address=host_ip, args=hosts) as url:
        port = int(url.rsplit(":", 1)[1])
        _first_session(host_ip, port)  # the dashboard's backend (and autostart) begins with a session
        _wait_ticker(ws, "RUNNING")
        yield ws, port, url


def _first_session(host: str, port: int) -> None:
    import socket

    from websockets.sync.client import connect

    from tests.e2e.netns_ws_client import Session

    sock = socket.create_connection((host, port), timeout=60)
    with connect(f"ws://{host}:{port}/_stcore/stream", sock=sock, subprotocols=["streamlit"],
                 open_timeout=60, max_size=None) as ws:
        Session(ws).run()


def _audit(ws: Path) -> list:
    with Store(ws / "state.db") as s:
        return list(reversed(audit.recent(s, limit=50)))


def _lines(proc: subprocess.Popen) -> queue.Queue:
    q: queue.Queue = queue.Queue()

    def pump():
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _next_line(q: queue.Queue, proc: subprocess.Popen, deadline: float) -> str:
    try:
        line = q.get(timeout=max(0.1, deadline - time.time()))
    except queue.Empty:
        raise AssertionError("the websocket client went quiet") from None
    if line is None:
        raise AssertionError(f"the websocket client ended: {proc.stderr.read()[-3000:]}")
    return line


@pytest.mark.timeout(300)
def test_raw_websocket_client_claiming_localhost_cannot_control(netns, tmp_path):
    ns, host_ip, ns_ip = netns
    with _dashboard(tmp_path, host_ip) as (ws, port, _url):
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, str(REPO / "tests/e2e/netns_ws_client.py"), host_ip,
             str(port), "alice", PASSWORD],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            q = _lines(proc)
            deadline = time.time() + 180
            steps = {}
            while True:
                line = _next_line(q, proc, deadline)
                if line.strip() == "READY":
                    break
                step = json.loads(line)
                steps[step["step"]] = step
            # the user is removed while the signed-in client's confirmation is open
            assert _cli(ws, "users", "remove", "alice").returncode == 0
            proc.stdin.write("go\n")
            proc.stdin.flush()
            last = json.loads(_next_line(q, proc, deadline))
            while (line := q.get(timeout=max(0.1, deadline - time.time()))) is not None:
                step = json.loads(line)
                steps[step["step"]] = step
            assert proc.wait(timeout=60) == 0, proc.stderr.read()[-3000:]
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)

        unsigned = steps["unsigned"]
        assert any(BANNER in a and f"connected from {ns_ip}" in a for a in unsigned["alerts"])
        for label in ("Start", "Stop", "Restart"):
            assert unsigned["buttons"][label]["disabled"] and BANNER in unsigned["buttons"][label]["help"]
        assert "Yes, stop" not in steps["unsigned-forged-stop"]["buttons"]  # the forged press went nowhere
        assert "Unknown user name or wrong password." in steps["wrong-password"]["alerts"]
        assert steps["signed-in"]["headings"][0] == "Servers"
        assert steps["signed-in-processes"]["buttons"]["Stop"]["disabled"] is False
        assert "Yes, stop" in steps["stop-pressed"]["buttons"]
        refused = [a for a in last["alerts"] if a.startswith("Could not stop **ticker**")]
        # alice was the only user: the dashboard is read-only now, and the runtime refuses
        assert refused and "Read-only" in refused[0], last["alerts"]
        assert any(a.startswith("Signed out: the user was removed") for a in last["alerts"])
        for title in ("Servers", "Processes", "GPUs"):  # read-only now, and every page says why
            banner = [a for a in steps[f"read-only {title}"]["alerts"] if a.startswith("Read-only")]
            assert banner and "no user is configured" in banner[0] and f"connected from {ns_ip}" in banner[0]
        assert steps["pages"]["pages"] == ["Benchmarks", "GPUs", "Processes", "Regeneration", "Servers", "Training"]  # no sign-in page: nobody to be
        assert not any(s.get("exceptions") for s in [*steps.values(), last])
        assert _ticker_state(ws) == "RUNNING"
        got = [(e.action, e.outcome, e.actor, e.client) for e in _audit(ws) if e.source == "dashboard"]
        assert got == [("login", "refused", "alice", ns_ip), ("login", "ok", "alice", ns_ip),
                       ("stop", "refused", "anonymous", ns_ip)]


@pytest.mark.timeout(300)
def test_browser_from_another_address_signs_in_stops_and_is_audited(netns, tmp_path):
    if not Path("/usr/bin/chromium").exists():
        pytest.fail("/usr/bin/chromium is missing: scripts/test installs Debian's chromium")
    ns, host_ip, ns_ip = netns
    out = tmp_path / "shots"
    with _dashboard(tmp_path, host_ip) as (ws, _port, url):
        r = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, str(REPO / "tests/e2e/netns_browser.py"), url, str(out),
             "alice"],
            cwd=REPO, env=dict(os.environ, SPECDECK_E2E_PASSWORD=PASSWORD), capture_output=True, text=True,
            timeout=240)
        assert r.returncode == 0, r.stderr[-4000:]
        seen = json.loads(r.stdout.strip().splitlines()[-1])
        _wait_ticker(ws, "EXITED")
        entries = [(e.action, e.outcome, e.actor, e.client) for e in _audit(ws) if e.source == "dashboard"]
    assert set(seen["banner"]) == {"Servers", "Processes", "GPUs"}
    assert all(f"connected from {ns_ip}" in text for text in seen["banner"].values())
    assert seen["stop_disabled_unsigned"] is True
    assert seen["wrong_password"] == "Unknown user name or wrong password."
    assert seen["signed_in"].startswith(f"Signed in as alice from {ns_ip}")
    assert seen["banner_after_sign_in"] == 0 and seen["stopped"] and seen["signed_out"]
    assert seen["exceptions"] == 0
    assert entries == [("login", "refused", "alice", ns_ip), ("login", "ok", "alice", ns_ip),
                       ("stop", "ok", "alice", ns_ip), ("logout", "ok", "alice", ns_ip)]
    SHOTS.mkdir(parents=True, exist_ok=True)
    for shot in out.glob("*.png"):
        shutil.copy(shot, SHOTS / shot.name)
