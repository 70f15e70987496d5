"""The dashboard reachable from the network, tried from a non-loopback address.

The test makes two network namespaces and a veth pair between them: the
dashboard runs in one and listens on its end (10.213.N.1), and Chromium and a
raw websocket client run in the other (10.213.N.2), so Streamlit sees a real
non-loopback TCP peer, and this host's own network never changes.  The raw client sends ``Host: localhost``; that must not make it local.
Needs root and ``ip netns`` (CI runs as root); elsewhere it skips and says why.
"""

from __future__ import annotations

import io
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
from types import SimpleNamespace

import pytest

from state import Store, audit
from tests.e2e import chromium
from tests.e2e._dashboard import serve
from tests.helpers import wait_for

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "artifacts" / "screenshots"
PASSWORD = "alice-password-1"
VIEWER_PASSWORD = "bob-password-1"
BANNER = "Sign in to start, stop or relaunch"
PAGES = ["Benchmarks", "GPUs", "Processes", "Regeneration", "Servers", "Training"]
# what a session that may view is sent: the pages, and the Overview, the page at "/"
VIEWABLE = sorted(PAGES + ["Overview"])
# what an anonymous session must never be sent: the workspace's name, its folder, a process name
# and its command line, a file's content
SECRETS = ("exposed", "ticker", "backend.demo", "root:x:0:0")

# netns: network namespaces made and removed (scripts/test runs these tests on their own, after the others)
pytestmark = [pytest.mark.browser, pytest.mark.netns]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"network namespace test cannot run in CI: {reason}")
    pytest.skip(f"network namespace test skipped: {reason}")


@pytest.fixture
def netns():
    """(client namespace, server address, client address) on a veth pair between two fresh network
    namespaces, the server's (``<client namespace>-s``, where the dashboard runs) and the client's; removed
    afterwards.  Nothing is added to this host's own network: a Chromium running meanwhile on this host
    (another test, another suite) drops its page loads when the host's network changes."""
    if os.geteuid() != 0:
        _unavailable("it needs root to create a network namespace (ip netns add)")
    if shutil.which("ip") is None:
        _unavailable("the `ip` command (iproute2) is missing")
    n = random.randrange(256)
    tag = f"{os.getpid() % 100000}{n}"
    ns, srv, host_if, ns_if = f"specdeck-{tag}", f"specdeck-{tag}-s", f"sdh{tag}"[:15], f"sdn{tag}"[:15]
    host_ip, ns_ip = f"10.213.{n}.1", f"10.213.{n}.2"
    try:
        _ip("netns", "add", ns)
        _ip("netns", "add", srv)
    except subprocess.CalledProcessError as exc:
        _ip("netns", "del", ns, check=False)
        _unavailable(f"`ip netns add` failed: {exc.stderr.strip()}")
    try:
        _ip("-n", srv, "link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", ns)
        for where, dev, addr in ((srv, host_if, host_ip), (ns, ns_if, ns_ip)):
            _ip("-n", where, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", where, "link", "set", dev, "up")
            _ip("-n", where, "link", "set", "lo", "up")
        yield ns, host_ip, ns_ip
    finally:
        _ip("netns", "del", ns, check=False)  # removes its end of the pair, and so the pair
        _ip("netns", "del", srv, check=False)
    assert ns not in _ip("netns", "list").stdout


def _cli(ws: Path, *args: str, stdin: str | None = None) -> SimpleNamespace:
    """``python -m backend.cli --workspace WS ARGS`` as ``main(argv)`` in this process (the dashboard
    under test is the other process); its exit status and output as ``subprocess.run`` gives them."""
    from backend.cli import main

    out, err, saved = io.StringIO(), io.StringIO(), sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        code = main(["--workspace", str(ws), *args], out=out, err=err)
    finally:
        sys.stdin = saved
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


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
def _dashboard(tmp: Path, net: tuple[str, str, str], *, users: bool = True, access: str = ""):
    """`streamlit run app.py --server.address HOST_IP` in the server's namespace, on a workspace with a
    ticker, and (``users``) alice, an operator, and bob, a viewer."""
    ns, host_ip, _ns_ip = net
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(f"""
[workspace]
name = "exposed"

[telemetry]
source = "fake"
{access}
[[process]]
name = "ticker"
argv = ["{sys.executable}", "-m", "backend.demo", "ticker", "--interval", "0.5"]
cwd = "{REPO}"
autostart = true
stop_grace_s = 5
""")
    if users:
        r = _cli(ws, "users", "add", "alice", "--password-stdin", stdin=PASSWORD + "\n")
        assert r.returncode == 0, r.stderr
        r = _cli(ws, "users", "add", "bob", "--role", "viewer", "--password-stdin", stdin=VIEWER_PASSWORD + "\n")
        assert r.returncode == 0, r.stderr
    # browsers reach it by this address: let Streamlit's Host check accept it (as a deployment would)
    hosts = ("--server.allowedHosts", "localhost", "--server.allowedHosts", "127.0.0.1",
             "--server.allowedHosts", host_ip)
    with serve(tmp / "home", workspace=ws, timeout_s=90, address=host_ip, args=hosts, netns=f"{ns}-s") as url:
        port = int(url.rsplit(":", 1)[1])
        _first_session(ns, host_ip, port)  # the dashboard's backend (and autostart) begins with a session
        _wait_ticker(ws, "RUNNING")
        yield ws, port, url


def _first_session(ns: str, host: str, port: int) -> None:
    """A first script run from the client's namespace (the raw client's anonymous steps)."""
    proc = _ws_client(ns, host, port, "--anonymous")
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]


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


def _steps(proc: subprocess.Popen, q: queue.Queue, deadline: float, until: str | None = "READY") -> dict:
    steps = {}
    while True:
        line = _next_line(q, proc, deadline) if until else q.get(timeout=max(0.1, deadline - time.time()))
        if line is None or (until and line.strip() == until):
            return steps
        step = json.loads(line)
        steps[step["step"]] = step


def _ws_client(ns: str, host_ip: str, port: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, str(REPO / "tests/e2e/netns_ws_client.py"), host_ip, str(port),
         *args], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _shows_nothing(step: dict, ws: Path) -> None:
    """A step that drew the sign-in page only: no navigation to anything else, no data."""
    assert step["pages"] == ["Sign in"], step["pages"]
    assert step["headings"][:1] == ["Sign in"], step["headings"]
    for secret in (*SECRETS, str(ws)):
        assert secret not in step["text"], f"{step['step']}: sent {secret!r}"


@pytest.mark.timeout(300)
def test_raw_websocket_client_claiming_localhost_gets_nothing_and_controls_nothing(netns, tmp_path):
    ns, host_ip, ns_ip = netns
    with _dashboard(tmp_path, netns) as (ws, port, _url):
        proc = _ws_client(ns, host_ip, port, "alice", PASSWORD, "bob", VIEWER_PASSWORD)
        try:
            q = _lines(proc)
            deadline = time.time() + 200
            steps = _steps(proc, q, deadline)
            # the operator is removed while her confirmation is open
            assert _cli(ws, "users", "remove", "alice").returncode == 0
            proc.stdin.write("go\n")
            proc.stdin.flush()
            steps.update(_steps(proc, q, deadline, until=None))
            assert proc.wait(timeout=60) == 0, proc.stderr.read()[-3000:]
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)

        # anonymous: the sign-in page and nothing else, whatever page or widget it asks for
        for name in ("anonymous", "anonymous-page-by-name", "operator-signed-out", "anonymous-forged-stop"):
            _shows_nothing(steps[name], ws)
        assert "Yes, stop" not in steps["anonymous-forged-stop"]["buttons"]
        if "anonymous-forged-path" in steps:
            assert "root:x:0:0" not in steps["anonymous-forged-path"]["text"]
        assert "Unknown user name or wrong password." in steps["wrong-password"]["alerts"]
        # the operator sees every page and may stop
        assert steps["operator"]["pages"] == VIEWABLE
        assert steps["operator-processes"]["buttons"]["Stop"]["disabled"] is False
        assert "Yes, stop" in steps["stop-pressed"]["buttons"]
        # the viewer sees every page, the ticker's figures included, and acts on nothing
        assert steps["viewer"]["pages"] == VIEWABLE
        viewer = steps["viewer-processes"]
        assert "ticker" in viewer["text"]
        assert viewer["buttons"]["Stop"]["disabled"] and "viewer" in viewer["buttons"]["Stop"]["help"]
        assert "Yes, stop" not in steps["viewer-forged-stop"]["buttons"]
        if "viewer-forged-path" in steps:
            assert "root:x:0:0" not in steps["viewer-forged-path"]["text"]
        # alice removed while her confirmation was open: signed out, back to the sign-in page
        last = steps["confirmed-after-removal"]
        assert any(a.startswith("Signed out: the user was removed") for a in last["alerts"]), last["alerts"]
        assert "ticker" not in last["text"]
        assert not any(st.get("exceptions") for st in steps.values())
        assert _ticker_state(ws) == "RUNNING"
        got = [(e.action, e.outcome, e.actor, e.client) for e in _audit(ws) if e.source == "dashboard"]
        assert ("stop", "ok", "alice", ns_ip) not in got and ("stop", "ok", "bob", ns_ip) not in got
        assert got[:3] == [("login", "refused", "alice", ns_ip), ("login", "ok", "alice", ns_ip),
                           ("logout", "ok", "alice", ns_ip)], got
        assert ("login", "ok", "bob", ns_ip) in got


@pytest.mark.timeout(300)
@pytest.mark.parametrize("users", [False, True], ids=["no-user", "users"])
def test_without_sign_in_nothing_is_shown_with_or_without_users(netns, tmp_path, users):
    ns, host_ip, _ns_ip = netns
    with _dashboard(tmp_path, netns, users=users) as (ws, port, _url):
        proc = _ws_client(ns, host_ip, port, "--anonymous")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
    steps = {json.loads(line)["step"]: json.loads(line) for line in out.splitlines() if line.startswith("{")}
    for step in steps.values():
        _shows_nothing(step, ws)
        assert not step["exceptions"]
    text = steps["anonymous"]["text"]
    assert ("No user is configured" in text) is (not users)
    assert ("User name" in text) is users


@pytest.mark.timeout(300)
def test_browser_from_another_address_signs_in_stops_and_is_audited(netns, tmp_path):
    why = chromium.missing()
    if why:
        pytest.fail(why)
    ns, host_ip, ns_ip = netns
    out = tmp_path / "shots"
    with _dashboard(tmp_path, netns) as (ws, _port, url):
        r = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, str(REPO / "tests/e2e/netns_browser.py"), url, str(out),
             "alice"],
            cwd=REPO, env=dict(os.environ, SPECDECK_E2E_PASSWORD=PASSWORD), capture_output=True, text=True,
            timeout=240)
        assert r.returncode == 0, r.stderr[-4000:]
        seen = json.loads(r.stdout.strip().splitlines()[-1])
        _wait_ticker(ws, "EXITED")
        entries = [(e.action, e.outcome, e.actor, e.client) for e in _audit(ws) if e.source == "dashboard"]
    for key in ("anonymous_page_url", "anonymous", "signed_out"):  # the sign-in page, nothing else
        shown = seen[key]
        assert shown["nav"] == 0 and shown["sidebar"] == "", (key, shown)
        for secret in (*SECRETS, str(ws), "Workspace:"):
            assert secret not in shown["text"], (key, secret)
    assert seen["wrong_password"] == "Unknown user name or wrong password."
    assert seen["signed_in"].startswith(f"Signed in as alice from {ns_ip}")
    assert seen["banner_after_sign_in"] == 0 and seen["stopped"]
    assert seen["exceptions"] == 0
    assert seen["hosts"] == [host_ip], seen["hosts"]  # nothing fetched from anywhere else (the icon included)
    assert entries == [("login", "refused", "alice", ns_ip), ("login", "ok", "alice", ns_ip),
                       ("stop", "ok", "alice", ns_ip), ("logout", "ok", "alice", ns_ip)]
    SHOTS.mkdir(parents=True, exist_ok=True)
    for shot in out.glob("*.png"):
        shutil.copy(shot, SHOTS / f"exposed-{shot.name}")


@pytest.mark.timeout(300)
def test_anonymous_view_shows_figures_but_no_logs_argv_or_paths(netns, tmp_path):
    ns, host_ip, _ns_ip = netns
    with _dashboard(tmp_path, netns, access="\n[access]\nanonymous_view = true\n") as (ws, port, _url):
        log = ws / "logs" / "ticker.log"
        wait_for(lambda: log.exists() and "tick 1" in log.read_text(), 30, "the ticker's first lines")
        proc = _ws_client(ns, host_ip, port, "--anonymous")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
    steps = {json.loads(line)["step"]: json.loads(line) for line in out.splitlines() if line.startswith("{")}
    assert sorted(steps["anonymous"]["pages"]) == sorted(VIEWABLE + ["Sign in"])
    processes = steps["anonymous-page-by-name"]
    assert processes["headings"][:1] == ["Processes"]
    assert "ticker" in processes["text"]  # its name and state are figures anyone may see
    for secret in ("tick 1", "ticker ready", "backend.demo", str(ws)):  # its log, its command line, the folder
        assert secret not in processes["text"], secret
    for label in ("Start", "Stop", "Restart"):
        assert processes["buttons"][label]["disabled"], label
    assert not any(s["exceptions"] for s in steps.values())
