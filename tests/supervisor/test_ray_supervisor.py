"""The supervisor against a real local Ray cluster (Ray 2.60 from .venv-cluster): a head with two fake
GPUs that Specdeck starts and ends by pid, and two worker raylets with the custom resources node_a and
node_b.  One cluster for the whole module: the suite runs on 2 cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from backend.supervisor.supervisor import Supervisor
from specdeck_types.process import Kind, ProcessSpec, ProcState as S, ReadinessProbe
from state import audit
from state.processes import ProcessRecord, ProcessRepo
from state.store import Store
from tests.supervisor.conftest import gone, wait_for
from tests.supervisor.ray_fixtures import ray_head
from tests.supervisor.test_ray_helpers import (
    cli, free_ports, needs_ray,
)

# tests/conftest.py keeps each module (and so its one cluster) in one xdist group.
pytestmark = [needs_ray, pytest.mark.slow, pytest.mark.timeout(420)]

PY = sys.executable
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SERVER = textwrap.dedent("""
    import http.server, os, sys
    port = int(sys.argv[1])
    print("env", os.environ.get("RAY_JOB_STOP_WAIT_TIME_S"), os.environ.get("CUDA_VISIBLE_DEVICES"),
          os.environ.get("GREETING"), flush=True)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")

PIDFILE_SLEEPER = textwrap.dedent("""
    import os, signal, sys, time
    if len(sys.argv) > 2 and sys.argv[2] == "ignore":
        signal.signal(signal.SIGTERM, lambda *a: print("got SIGTERM, ignoring", flush=True))
    open(sys.argv[1], "w").write(str(os.getpid()))
    print("sleeping", os.getpid(), flush=True)
    time.sleep(300)
""")

CONFIG = f"""
[[process]]
name = "cli-sleeper"
argv = ["{PY}", "-c", "import time; print('cli up', flush=True); time.sleep(300)"]
where = "ray"
stop_grace_s = 2
"""


@pytest.fixture(scope="module")
def ray():
    with ray_head(CONFIG, workers=[{"node_a": 1}, {"node_b": 1}]) as rc:
        yield rc


@pytest.fixture
def sup(ray):
    store = Store(ray.root / "state.db")
    sups: list[Supervisor] = []

    def make() -> Supervisor:
        s = Supervisor(store, ray.root / "run", default_cwd=ray.root)
        sups.append(s)
        return s

    s = make()
    s.make = make  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        for v in s.views():
            if v.spec.on_ray and v.live:
                try:
                    s.stop(v.name, actor="teardown", wait=True)
                except Exception:
                    pass
        for x in sups:
            x.close()
        store.close()


def spec(ray, name: str, code: str, *args: str, **kw) -> ProcessSpec:
    return ProcessSpec(name=name, kind=kw.pop("kind", Kind.OTHER), argv=(PY, "-c", code, *args),
                       log_path=str(ray.root / "logs" / f"{name}.log"), where="ray", **kw)


def state(sup: Supervisor, name: str) -> S:
    return sup.view(name).state


def wait_state(sup: Supervisor, name: str, *states: S, timeout_s: float = 90.0):
    wait_for(lambda: state(sup, name) in states, timeout_s=timeout_s, interval_s=0.3, poll=sup.poll)
    return sup.view(name)


def read_pid(path, timeout_s: float = 60.0) -> int:
    wait_for(lambda: path.exists() and path.read_text().strip(), timeout_s=timeout_s, interval_s=0.2)
    return int(path.read_text())


def test_start_is_running_only_once_readiness_passes_then_stop(ray, sup):
    port = free_ports(1)[0]
    sup.sync_specs([spec(ray, "web", SERVER, str(port), env={"GREETING": "hello"}, num_gpus=1, stop_grace_s=4,
                         readiness=ReadinessProbe(kind="http", url=f"http://127.0.0.1:{port}/", interval_s=0.3))],
                   prune=False)
    v = sup.start("web", actor="ann", source="test")
    assert v.state == S.STARTING and v.backend == "ray" and v.submission_id == v.run_id
    info = ray.client.info(v.submission_id)
    assert info is not None and info.metadata["specdeck_user"] == "ann" and info.metadata["specdeck_name"] == "web"
    v = wait_state(sup, "web", S.RUNNING)
    assert v.detail.startswith("ready: HTTP 200")
    assert ray.client.info(v.submission_id).status == "RUNNING"
    # The driver log is copied into the workspace's log file: the environment reached the argv.
    wait_for(lambda: "env 4 " in open(v.log_path).read(), timeout_s=30, poll=sup.poll, interval_s=0.3)
    line = next(ln for ln in open(v.log_path) if ln.startswith("env "))
    assert line.split()[2] in ("0", "1") and line.split()[3] == "hello"  # one of the two fake GPUs
    v = sup.stop("web", actor="ann", source="test", wait=True)
    assert v.state == S.EXITED and v.detail.startswith("stopped")
    assert ray.client.info(v.submission_id).status == "STOPPED"
    actions = [(e.actor, e.action) for e in audit.recent(sup.store, 50, target="web")]
    assert ("ann", "start") in actions and ("ann", "stop") in actions


def test_stop_of_a_child_that_ignores_sigterm_kills_it_after_the_grace(ray, sup, tmp_path):
    pidfile = tmp_path / "stubborn.pid"
    sup.sync_specs([spec(ray, "stubborn", PIDFILE_SLEEPER, str(pidfile), "ignore", stop_grace_s=2)], prune=False)
    sup.start("stubborn")
    wait_state(sup, "stubborn", S.RUNNING)
    pid = read_pid(pidfile)
    t0 = time.monotonic()
    v = sup.stop("stubborn", wait=True)
    assert v.state == S.EXITED
    wait_for(lambda: gone(pid), timeout_s=30)
    assert time.monotonic() - t0 >= 1.5  # it outlived SIGTERM until the grace was over
    wait_for(lambda: "got SIGTERM, ignoring" in open(v.log_path).read(), timeout_s=20, poll=sup.poll)


def test_job_killed_from_outside_is_recorded_with_the_signal(ray, sup, tmp_path):
    pidfile = tmp_path / "victim.pid"
    sup.sync_specs([spec(ray, "victim", PIDFILE_SLEEPER, str(pidfile))], prune=False)
    sup.start("victim")
    wait_state(sup, "victim", S.RUNNING)
    os.kill(read_pid(pidfile), signal.SIGKILL)
    v = wait_state(sup, "victim", S.EXITED, S.FATAL)
    assert v.exit_code == -signal.SIGKILL
    assert "killed by SIGKILL" in v.detail and "FAILED" in v.detail


def test_custom_resource_pins_the_job_to_its_node(ray, sup, tmp_path):
    pidfile = tmp_path / "pinned.pid"
    sup.sync_specs([spec(ray, "pinned", PIDFILE_SLEEPER, str(pidfile), resources={"node_b": 1})], prune=False)
    v = sup.start("pinned")
    wait_state(sup, "pinned", S.RUNNING)
    node_b = [n["node_id"] for n in ray.client.nodes() if n["resources"].get("node_b")]
    assert ray.client.info(v.submission_id).driver_node_id in node_b and len(node_b) == 1
    sup.stop("pinned", wait=True)


def test_a_queued_job_is_stopped_by_specdeck_and_never_runs_its_program(ray, sup, tmp_path):
    specs = [spec(ray, f"gpu{i}", PIDFILE_SLEEPER, str(tmp_path / f"gpu{i}.pid"), num_gpus=1, stop_grace_s=1)
             for i in range(3)]
    sup.sync_specs(specs, prune=False)
    for i in range(2):
        sup.start(f"gpu{i}")
    for i in range(2):
        wait_state(sup, f"gpu{i}", S.RUNNING)
    sup.start("gpu2")
    wait_for(lambda: (sup.view("gpu2").pending or "").startswith("waiting for resources"), timeout_s=60,
             poll=sup.poll, interval_s=0.3)
    v = sup.view("gpu2")
    assert v.state == S.STARTING and ray.client.info(v.submission_id).status == "PENDING"
    v = sup.stop("gpu2", actor="bob", wait=True)
    assert v.state == S.EXITED and "while queued" in v.detail
    for i in range(2):
        assert state(sup, f"gpu{i}") == S.RUNNING
        sup.stop(f"gpu{i}", wait=True)
    # Once a GPU frees, Ray places the job and ends it at once.  Ray sends the stop only after it has started the
    # job's entrypoint: a stop that reaches the entrypoint first means the program never starts; on a loaded
    # machine the entrypoint can start it first (seen once in a full run), and then the program ends with it.
    wait_for(lambda: ray.client.info(v.submission_id).terminal, timeout_s=60, interval_s=0.5)
    pidfile = tmp_path / "gpu2.pid"
    if pidfile.exists():
        pid = int(pidfile.read_text() or 0)
        wait_for(lambda: gone(pid), timeout_s=15, interval_s=0.2)
    assert sup.view("gpu2").state == S.EXITED  # Specdeck's record stands


def test_supervisor_killed_and_restarted_readopts_the_ray_job(ray, sup):
    code, out, err = cli(ray.root, "processes", "start", "cli-sleeper")
    assert code == 0, err
    started = sup.view("cli-sleeper").run_id
    env = dict(os.environ, PYTHONPATH=REPO)
    loop = subprocess.Popen([PY, "-m", "backend.cli", "-w", str(ray.root), "supervise", "--interval", "0.5"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        log_path = ray.root / "logs" / "cli-sleeper.log"
        wait_for(lambda: log_path.exists() and "cli up" in log_path.read_text(), timeout_s=60, interval_s=0.3)
    finally:
        os.killpg(loop.pid, signal.SIGKILL)  # the dashboard dies without a word
        loop.wait(timeout=10)
    fresh = sup.make()
    v = wait_state(fresh, "cli-sleeper", S.RUNNING, timeout_s=30)  # ready (no probe) once Ray runs it
    assert v.backend == "ray" and v.run_id == started
    assert ray.client.info(v.submission_id).status == "RUNNING"
    code, out, err = cli(ray.root, "processes", "list", "--json")
    row = next(r for r in json.loads(out) if r["name"] == "cli-sleeper")
    assert row["backend"] == "ray" and row["submission_id"] == v.submission_id and row["state"] == "RUNNING"
    assert next(r for r in json.loads(out) if r["name"] == "ray-head")["backend"] == "local"
    code, out, err = cli(ray.root, "processes", "stop", "cli-sleeper")
    assert code == 0 and "EXITED" in out, err
    assert ray.client.info(v.submission_id).status == "STOPPED"


def test_a_job_ray_forgot_is_lost_with_the_reason(ray, sup):
    s = spec(ray, "forgotten", "print(1)")
    ProcessRepo(sup.store).upsert(ProcessRecord(name="forgotten", kind="other", spec=s, state=S.RUNNING,
                                                state_since=time.time(), run_id="20200101T000000-deadbeef",
                                                started_at=time.time(), log_path=s.log_path))
    v = wait_state(sup.make(), "forgotten", S.FATAL, timeout_s=30)
    assert v.detail.startswith("lost: the Ray cluster at http://127.0.0.1:")
    assert "20200101T000000-deadbeef" in v.detail and "head restarted" in v.detail


def test_cluster_status_json_lists_nodes_resources_and_jobs(ray, sup):
    sup.sync_specs([spec(ray, "once", "print('done')")], prune=False)
    sup.start("once", actor="fay")
    wait_state(sup, "once", S.EXITED)
    code, out, err = cli(ray.root, "cluster", "status", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["up"] and d["version"] == "2.60.0" and d["local"] and d["head_pid"]
    assert len(d["nodes"]) == 3 and sum(n["resources"].get("GPU", 0) for n in d["nodes"]) == 2
    assert {k for n in d["nodes"] for k in n["resources"]} >= {"node_a", "node_b"}
    job = next(j for j in d["jobs"] if j["submission_id"] == sup.view("once").submission_id)
    assert (job["name"], job["user"], job["status"], job["exit_code"]) == ("once", "fay", "SUCCEEDED", 0)
    assert "once" in {p["name"] for p in d["processes"]}


def test_last_lines_come_from_rays_state_api_when_the_workspace_has_no_copy(ray, sup):
    code = "import time\nfor i in range(30):\n    print('line', i, flush=True)\ntime.sleep(300)"
    sup.sync_specs([spec(ray, "chatty", code, stop_grace_s=1)], prune=False)
    v = sup.start("chatty")
    wait_state(sup, "chatty", S.RUNNING)
    wait_for(lambda: "line 29" in open(v.log_path).read(), timeout_s=30, poll=sup.poll, interval_s=0.3)
    assert open(v.log_path).read().count("line 29\n") == 1
    os.unlink(v.log_path)  # the workspace's copy is gone (another machine's dashboard, a cleanup)
    text, offset = sup.tail_last("chatty", lines=5)
    assert text.splitlines() == [f"line {i}" for i in range(25, 30)] and offset == 0
    sup.stop("chatty", wait=True)
