"""The [[router]] reconciler against a real sglang-router (the cluster environment's) in front of three
simulated servers, all supervised processes on 127.0.0.1: servers join when RUNNING and leave when
stopped, a pending add that a delete did not cancel is removed when it shows up, a restarted router is
given every ready server again, and a relaunch drains the server first."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from backend.flows.router_sync import RouterSync, drain, is_draining
from backend.sglang.routerclient import RouterClient, RouterError
from tests.helpers import free_port, wait_for
from tests.regen.jobkit import SimServer
from tests.simws import make_models, running_fleet

pytestmark = pytest.mark.timeout(300)

CLUSTER_PY = os.environ.get("SPECDECK_CLUSTER_PYTHON") or str(
    Path(__file__).resolve().parents[2] / ".venv-cluster" / "bin" / "python")
FAST = '{ SPECDECK_SIM_SPEED = "200", SPECDECK_SIM_BASELINE_TOK_S = "4000", SPECDECK_SIM_PEAK_TOK_S = "400000" }'


def fleet_toml(target: Path, ports: list[int], router_port: int, *, key_file: str | None = None) -> str:
    text = '[workspace]\nname = "routers"\n\n[telemetry]\nsource = "fake"\n'
    for name, port in zip("abc", ports):
        text += (f'\n[[server]]\nname = "{name}"\nmodel_path = "{target}"\nport = {port}\nsimulate = true\n'
                 f'env = {FAST}\n')
    text += (f'\n[[router]]\nname = "fleet"\nport = {router_port}\nmetrics_port = {free_port()}\n'
             f'policy = "round_robin"\nhealth_check_interval_s = 1\nhealth_failure_threshold = 1\n'
             f'drain_timeout_s = 20\npython = "{CLUSTER_PY}"\n')
    if key_file:
        text += f'control_plane_key_file = "{key_file}"\n'
    return text


def _running(sup, name: str) -> bool:
    v = sup.view(name)
    return v is not None and v.state.value == "RUNNING"


def _listed(sync: RouterSync) -> dict[str, bool]:
    """url -> healthy of the router's workers after one tick."""
    (view,) = sync.tick()
    assert view.error is None, view.error
    return {w.url: bool(w.healthy) for w in view.workers if w.listed}


def _urls(ports) -> set[str]:
    return {f"http://127.0.0.1:{p}" for p in ports}


@pytest.fixture
def fleet(tmp_path):
    target, _ = make_models(tmp_path / "models")
    ports, rport = [free_port() for _ in range(3)], free_port()
    with running_fleet(tmp_path / "ws", fleet_toml(target, ports, rport)) as f:
        for n in ("a", "b", "c", "fleet"):
            f.sup.start(n, actor="test", source="test")
        for n in ("a", "b", "c", "fleet"):
            wait_for(lambda n=n: _running(f.sup, n), 60, f"{n} RUNNING")
        yield f, ports, rport


def test_servers_join_when_running_leave_when_stopped_and_a_restarted_router_gets_them_again(fleet):
    f, ports, rport = fleet
    sync = RouterSync(f.fleet, f.sup, f.ws.run_dir)
    wait_for(lambda: _listed(sync) == {u: True for u in _urls(ports)}, 60, "three healthy workers")
    again = sync.tick()[0]
    assert again.added == () and again.removed == ()  # idempotent: nothing left to change

    # a request through the router is answered by a simulated server
    req = urllib.request.Request(f"http://127.0.0.1:{rport}/v1/chat/completions", method="POST",
                                 data=json.dumps({"model": "m", "max_tokens": 4,
                                                  "messages": [{"role": "user", "content": "hi"}]}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert json.loads(r.read())["choices"][0]["message"]["content"]

    f.sup.stop("b", actor="test", source="test", wait=True)
    wait_for(lambda: set(_listed(sync)) == _urls([ports[0], ports[2]]), 30, "b removed")
    view = sync.tick()[0]
    b = next(w for w in view.workers if w.server == "b")
    assert not b.listed and b.server_state in ("EXITED", "STOPPING")

    f.sup.start("b", actor="test", source="test")
    wait_for(lambda: _running(f.sup, "b"), 60, "b RUNNING again")
    wait_for(lambda: _listed(sync) == {u: True for u in _urls(ports)}, 60, "b back")

    # the router restarts (a new run): it knows no worker; the reconciler adds all three again
    f.sup.restart("fleet", actor="test", source="test", wait=True)
    wait_for(lambda: _running(f.sup, "fleet"), 60, "the router RUNNING again")
    assert RouterClient(f"http://127.0.0.1:{rport}").workers() == []
    wait_for(lambda: _listed(sync) == {u: True for u in _urls(ports)}, 60, "all three re-added")


def test_a_pending_add_that_a_delete_did_not_cancel_is_removed_when_it_shows_up(fleet, tmp_path):
    f, ports, rport = fleet
    sync = RouterSync(f.fleet, f.sup, f.ws.run_dir)
    wait_for(lambda: len(_listed(sync)) == 3, 60, "three workers")
    client = RouterClient(f"http://127.0.0.1:{rport}")
    stray_port = free_port()
    stray = SimServer(tmp_path, port=stray_port)
    try:
        wid = client.add(f"http://127.0.0.1:{stray_port}")  # nothing listens yet: the add stays pending
        client.remove(wid)  # does not cancel it
        stray.start()
        # the router registers it once it answers /health, delete or not
        wait_for(lambda: f"http://127.0.0.1:{stray_port}" in {w.url for w in client.workers()}, 60,
                 "the stray worker registered despite the delete")
        view = sync.tick()[0]
        assert f"http://127.0.0.1:{stray_port}" in view.removed
        wait_for(lambda: {w.url for w in client.workers()} == _urls(ports), 30, "only the fleet's servers")
    finally:
        stray.stop()


def test_a_relaunch_drains_the_server_first_and_the_new_run_joins_again(fleet):
    from backend.flows.relaunch import relaunch_and_wait

    f, ports, rport = fleet
    sync = RouterSync(f.fleet, f.sup, f.ws.run_dir)
    wait_for(lambda: len(_listed(sync)) == 3, 60, "three workers")
    old_pid = f.sup.view("a").pid

    # drain alone: out of the router, and the reconciler leaves that run out while the marker holds
    res = drain(f.fleet, f.sup, f.ws.run_dir, "a")
    assert res is not None and res.routers == ("fleet",) and res.in_flight in (0, None)
    assert is_draining(f.ws.run_dir, "a", old_pid, __import__("time").time())
    wait_for(lambda: set(_listed(sync)) == _urls(ports[1:]), 30, "a out of the router")
    assert set(_listed(sync)) == _urls(ports[1:])  # a tick does not add a draining run back

    class S:  # what relaunch_and_wait needs of a session
        ws, sup, fleet = f.ws, f.sup, f.fleet

    phases = []
    cfg = f.fleet.config("a").model_copy(update={"decode_log_interval": 7})
    out = relaunch_and_wait(S, "a", cfg, actor="test", source="test", timeout_s=90,
                            on_phase=lambda p, d: phases.append((p, d)))
    names = [p for p, _ in phases]
    assert names.index("drained") < names.index("relaunching"), phases
    assert out.pid != old_pid
    assert "--decode-log-interval" in f.sup.view("a").spec.argv
    wait_for(lambda: _listed(sync) == {u: True for u in _urls(ports)}, 60, "the new run of a joined")


def test_servers_list_json_shows_the_router_with_its_workers(fleet):
    from tests.regen.jobkit import run_cli_top

    f, ports, rport = fleet
    sync = RouterSync(f.fleet, f.sup, f.ws.run_dir)
    wait_for(lambda: _listed(sync) == {u: True for u in _urls(ports)}, 60, "three healthy workers")
    r = run_cli_top("--workspace", str(f.ws.root), "servers", "list", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert [rows[n]["kind"] for n in ("a", "b", "c", "fleet")] == ["server"] * 3 + ["router"]
    assert rows["a"]["routers"] == ["fleet"] and rows["a"]["state"] == "RUNNING"
    router = rows["fleet"]
    assert router["state"] == "RUNNING" and router["policy"] == "round_robin"
    assert router["url"] == f"http://127.0.0.1:{rport}" and router["servers"] == ["a", "b", "c"]
    assert router["healthy_workers"] == 3
    workers = {w["server"]: w for w in router["workers"]}
    assert {w["url"] for w in workers.values()} == _urls(ports)
    assert all(w["listed"] and w["healthy"] and w["load"] == 0 for w in workers.values())

    # a reading command changes nothing: a stopped server stays listed until a reconciler removes it
    f.sup.stop("c", actor="test", source="test", wait=True)
    r = run_cli_top("--workspace", str(f.ws.root), "servers", "list", "--json")
    c = next(w for w in json.loads(r.stdout)[-1]["workers"] if w["server"] == "c")
    assert c["server_state"] == "EXITED" and c["listed"]
    text = run_cli_top("--workspace", str(f.ws.root), "servers", "list").stdout
    assert f"fleet: router RUNNING · http://127.0.0.1:{rport} · round_robin" in text


def test_a_drain_waits_for_the_requests_in_flight_on_that_server(fleet):
    import threading
    import time

    f, ports, rport = fleet
    sync = RouterSync(f.fleet, f.sup, f.ws.run_dir)
    wait_for(lambda: len(_listed(sync)) == 3, 60, "three workers")
    answers = []

    def ask() -> None:  # a long answer straight to server a: about 2 s at the simulator's 4,000 tok/s
        req = urllib.request.Request(f"http://127.0.0.1:{ports[0]}/v1/chat/completions", method="POST",
                                     data=json.dumps({"model": "m", "max_tokens": 8000, "ignore_eos": True,
                                                      "messages": [{"role": "user", "content": "go"}]}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            answers.append((r.status, time.monotonic()))

    t = threading.Thread(target=ask)
    t.start()
    try:
        from backend.sglang.routerclient import LoadUnanswered, live_load

        def live(url: str) -> int | None:
            try:
                return live_load(url)
            except LoadUnanswered:  # a late answer on a loaded machine: asked again
                return None

        # its live count (/get_load): the /metrics gauge can still say 1 from an earlier test's request while
        # this one is not yet submitted, and the drain would then rightly find nothing in flight
        wait_for(lambda: live(f"http://127.0.0.1:{ports[0]}") == 1, 30, "the request in flight on a")
        res = drain(f.fleet, f.sup, f.ws.run_dir, "a")
        ended = time.monotonic()
    finally:
        t.join(120)
    assert answers and answers[0][0] == 200
    assert res is not None and res.in_flight == 0
    # the drain returned only once the server had finished the request (the simulator's own record, on the
    # machine's monotonic clock); its answer then still has to be written and read, which on a loaded machine
    # took up to 3 s after the server's count reached 0
    with urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/sim/requests", timeout=30) as r:
        done = [x for x in json.loads(r.read())["finished"] if x["completion_tokens"] == 8000]
    assert len(done) == 1 and done[0]["finished"] <= ended
    assert set(_listed(sync)) == _urls(ports[1:])


def test_a_router_with_a_control_plane_key_refuses_others_and_the_reconciler_uses_the_key(tmp_path):
    target, _ = make_models(tmp_path / "models")
    ports, rport = [free_port() for _ in range(3)], free_port()
    root = tmp_path / "ws"
    root.mkdir()
    (root / "router.key").write_text("k3y-for-the-test\n")
    with running_fleet(root, fleet_toml(target, ports, rport, key_file="router.key")) as f:
        for n in ("a", "fleet"):
            f.sup.start(n, actor="test", source="test")
        for n in ("a", "fleet"):
            wait_for(lambda n=n: _running(f.sup, n), 60, f"{n} RUNNING")
        spec = f.sup.view("fleet").spec
        assert "k3y-for-the-test" not in " ".join(spec.argv)  # never on the command line
        with pytest.raises(Exception, match="HTTP 401: the control-plane key was not given"):
            RouterClient(f"http://127.0.0.1:{rport}").workers()
        with pytest.raises(Exception, match="HTTP 401: the control-plane key was refused"):
            RouterClient(f"http://127.0.0.1:{rport}", key="wrong").workers()
        sync = RouterSync(f.fleet, f.sup, f.ws.run_dir)
        wait_for(lambda: _listed(sync) == {f"http://127.0.0.1:{ports[0]}": True}, 60, "a behind the router")


def test_supervise_on_the_command_line_keeps_the_router_workers(fleet, tmp_path):
    import signal
    import subprocess
    import sys

    f, ports, rport = fleet
    client = RouterClient(f"http://127.0.0.1:{rport}")
    assert client.workers() == []  # nothing reconciles yet
    log = open(tmp_path / "supervise.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "backend.cli", "--workspace", str(f.ws.root), "supervise",
                             "--interval", "0.5", "--no-alerts"], cwd=str(Path(__file__).resolve().parents[2]),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: {w.url for w in client.workers() if w.healthy} == _urls(ports), 90,
                 "supervise adds the three servers")
        f.sup.stop("c", actor="test", source="test", wait=True)
        wait_for(lambda: {w.url for w in client.workers()} == _urls(ports[:2]), 60, "supervise removes c")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
    assert proc.returncode == 0, (tmp_path / "supervise.log").read_text()[-2000:]


def test_the_dashboard_runtime_keeps_the_router_workers(tmp_path, monkeypatch):
    from backend import runtime as runtime_mod
    from tests.helpers import close_runtime

    target, _ = make_models(tmp_path / "models")
    ports, rport = [free_port() for _ in range(3)], free_port()
    root = tmp_path / "ws"
    root.mkdir()
    (root / "specdeck.toml").write_text(fleet_toml(target, ports, rport))
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(root))
    try:
        rt = runtime_mod.get_runtime()
        for n in ("a", "b", "fleet"):
            rt.start(n, actor="test", source="test", force=True)
        client = RouterClient(f"http://127.0.0.1:{rport}")

        def healthy() -> set[str]:
            try:
                return {w.url for w in client.workers() if w.healthy}
            except RouterError:  # the router is still starting
                return set()

        wait_for(lambda: healthy() == _urls(ports[:2]), 90, "the runtime adds the two running servers")
        wait_for(lambda: rt.router_sync.view("fleet").healthy_workers == 2, 30, "the runtime's view says so")
        view = rt.router_sync.view("fleet")
        assert view.state == "RUNNING"
        assert {w.server: w.listed for w in view.workers} == {"a": True, "b": True, "c": False}
    finally:
        close_runtime(root)


def test_bench_run_measures_through_the_router_by_name(fleet):
    from tests.regen.jobkit import run_cli_top

    f, ports, rport = fleet
    sync = RouterSync(f.fleet, f.sup, f.ws.run_dir)
    wait_for(lambda: _listed(sync) == {u: True for u in _urls(ports)}, 60, "three healthy workers")
    r = run_cli_top("--workspace", str(f.ws.root), "bench", "run", "fleet", "--builtin", "--concurrency", "3",
                    "--num-prompts", "12", "--input-len", "32", "--output-len", "16", "--backend", "sglang-oai-chat",
                    "--json", timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["server"] == "fleet" and not result["invalid"], result
    assert result["results"]["completed"] == 12 and result["results"]["output_tok_s"] > 0
    assert result["results"]["accept_len"] is None  # a router has no decode lines of its own
