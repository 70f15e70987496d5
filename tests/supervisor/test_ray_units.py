"""The Ray backend's parts that need no cluster: config, the entrypoint wrapper run under /bin/sh,
readiness URLs, pending reasons, exit codes, and the REST client against a small fake dashboard."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from backend.supervisor.raybackend import pending_reason, probe_url
from backend.supervisor.raycluster import Cluster, entrypoint, exit_code_of, load_cluster
from backend.supervisor.rayjobs import JobInfo, RayApiError, RayJobsClient
from backend.workspace import ClusterConfig, ConfigError, parse_config
from specdeck_types.process import Kind, ProcessSpec
from tests.supervisor.conftest import gone, wait_for

PY = sys.executable


# -- config --------------------------------------------------------------------

def test_where_ray_without_cluster_names_the_line():
    text = '[[process]]\nname = "a"\nargv = ["x"]\n\n[[process]]\nname = "b"\nargv = ["y"]\nwhere = "ray"\n'
    with pytest.raises(ConfigError) as e:
        parse_config(text, "ws/specdeck.toml")
    assert str(e.value).startswith('ws/specdeck.toml:8: process[1].where: "ray" needs a [cluster] section')


def test_where_ray_on_server_and_train_tables_needs_cluster_too():
    text = '[[server]]\nname = "s"\nmodel_path = "m"\nwhere = "ray"\n'
    with pytest.raises(ConfigError) as e:
        parse_config(text, "f.toml")
    assert "f.toml:4: server[0].where" in str(e.value)
    cfg = parse_config(text + '\n[cluster]\naddress = "local"\n', "f.toml")
    assert cfg.cluster is not None and cfg.cluster.is_local


def test_remote_cluster_requires_token_file_and_a_url():
    with pytest.raises(ConfigError) as e:
        parse_config('[cluster]\naddress = "http://10.0.0.1:8265"\n', "f.toml")
    assert "f.toml:1: cluster" in str(e.value) and "token_file" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_config('[cluster]\naddress = "10.0.0.1:8265"\n', "f.toml")
    assert "f.toml:2: cluster.address" in str(e.value)
    cfg = parse_config('[cluster]\naddress = "http://10.0.0.1:8265/"\ntoken_file = "tok"\n', "f.toml")
    assert cfg.cluster.address == "http://10.0.0.1:8265"


def test_process_placement_fields_reach_the_spec(tmp_path):
    from backend.workspace import Workspace

    text = ('[cluster]\nnum_gpus = 2\n\n[[process]]\nname = "p"\nargv = ["x"]\nwhere = "ray"\nnum_gpus = 1\n'
            'resources = { node_a = 1 }\n')
    cfg = parse_config(text, "f.toml")
    spec = Workspace(root=tmp_path, config_path=tmp_path / "f.toml", config=cfg).process_specs()[0]
    assert (spec.where, spec.num_gpus, spec.resources) == ("ray", 1.0, {"node_a": 1.0})
    with pytest.raises(ConfigError) as e:
        parse_config(text.replace("node_a", '"bad name"'), "f.toml")
    assert "resources" in str(e.value)


def test_old_spec_json_without_placement_reads_as_local():
    spec = ProcessSpec(name="a", kind=Kind.OTHER, argv=("x",), log_path="l")
    d = json.loads(spec.to_json())
    for k in ("where", "num_gpus", "num_cpus", "resources"):
        d.pop(k)
    old = ProcessSpec.from_dict(d)
    assert old == spec and old.where == "local" and not old.on_ray
    with pytest.raises(ValueError):
        ProcessSpec(name="a", kind=Kind.OTHER, argv=("x",), log_path="l", where="mars")  # type: ignore[arg-type]


def test_load_cluster_reads_the_section_and_the_token(tmp_path):
    (tmp_path / "specdeck.toml").write_text('[cluster]\naddress = "http://h:8265"\ntoken_file = "tok"\n')
    c = load_cluster(tmp_path)
    assert c is not None and not c.is_local and c.address() == "http://h:8265"
    with pytest.raises(Exception) as e:
        c.token()
    assert "token_file" in str(e.value) and "tok" in str(e.value)
    (tmp_path / "tok").write_text("s3cret\n")
    assert c.token() == "s3cret"
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "x"\n')
    assert load_cluster(tmp_path) is None


def test_local_head_spec_uses_free_ports_its_own_temp_dir_home_and_auth_mode(tmp_path):
    c = Cluster(ClusterConfig(num_cpus=2, num_gpus=2, resources={"box": 1}), tmp_path)
    spec = c.head_spec()
    argv = list(spec.argv)
    assert argv[1:4] == ["start", "--head", "--block"]
    assert argv[argv.index("--dashboard-host") + 1] == "127.0.0.1"
    assert argv[argv.index("--num-gpus") + 1] == "2" and json.loads(argv[argv.index("--resources") + 1]) == {"box": 1}
    ports = {argv[argv.index(f) + 1] for f in ("--port", "--dashboard-port", "--ray-client-server-port",
                                               "--dashboard-agent-listen-port", "--metrics-export-port")}
    assert len(ports) == 5
    assert spec.env["RAY_AUTH_MODE"] == "disabled" and spec.env["HOME"].startswith(str(tmp_path))
    assert "stop" not in argv


# -- the entrypoint wrapper ------------------------------------------------------

def _spec(code: str, grace: float = 1.0) -> ProcessSpec:
    return ProcessSpec(name="w", kind=Kind.OTHER, argv=(PY, "-c", code), log_path="unused", stop_grace_s=grace)


def test_entrypoint_runs_argv_in_cwd_and_passes_the_exit_code(tmp_path):
    cmd = entrypoint(_spec("import os, sys; print(os.getcwd()); sys.exit(3)"), python=PY, cwd=str(tmp_path))
    r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=30)
    assert r.returncode == 3 and r.stdout.strip() == str(tmp_path)


def test_entrypoint_ends_background_children_of_its_group_when_the_argv_exits(tmp_path):
    pidfile = tmp_path / "bg.pid"
    code = textwrap.dedent(f"""
        import subprocess, sys
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(p.pid))
    """)
    r = subprocess.run(["/bin/sh", "-c", entrypoint(_spec(code), python=PY, cwd=None)], timeout=30)
    assert r.returncode == 0
    bg = int(pidfile.read_text())
    wait_for(lambda: gone(bg), timeout_s=10)


def test_entrypoint_passes_sigterm_to_the_group_and_reports_the_signal(tmp_path):
    ready = tmp_path / "ready"
    code = f"import time; open({str(ready)!r}, 'w').close(); time.sleep(60)"
    p = subprocess.Popen(["/bin/sh", "-c", entrypoint(_spec(code), python=PY, cwd=None)])
    try:
        wait_for(ready.exists, timeout_s=20)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 128 + signal.SIGTERM
        assert exit_code_of(p.returncode) == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()


def test_a_stop_at_any_moment_of_the_entrypoints_start_never_leaves_the_program_running(tmp_path):
    """Ray stops a queued job as soon as it places it, so the stop can reach the wrapper while it starts the
    program.  Whenever it comes, the program either never starts or ends with the wrapper: never an orphan
    in its own session (a stop during the child's start used to exit the wrapper and leave it running)."""
    import os
    import random
    import shlex

    import psutil

    def argv_for(pidfile):
        code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
        argv = shlex.split(entrypoint(_spec(code), python=PY, cwd=None))
        assert argv[0] == "exec"
        return argv[1:]

    starts = []  # how long the wrapper takes to start the program, on this machine now
    for k in range(3):
        pidfile = tmp_path / f"t{k}.pid"
        t0 = time.monotonic()
        p = subprocess.Popen(argv_for(pidfile))
        wait_for(lambda: pidfile.exists() and pidfile.read_text(), timeout_s=20, interval_s=0.001)
        starts.append(time.monotonic() - t0)
        p.terminate()
        p.wait(timeout=20)
    start = sorted(starts)[1]
    rng = random.Random(20261202)
    pidfiles = []
    try:
        for k in range(100):
            pidfiles.append(tmp_path / f"r{k}.pid")
            p = subprocess.Popen(argv_for(pidfiles[-1]))
            time.sleep(rng.uniform(0.2, 1.0) * start)
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=20) in (0, 128 + signal.SIGTERM, -signal.SIGTERM)
        time.sleep(1.0)  # a program the wrapper lost would have written its pid by now
        left = []
        for f in pidfiles:
            if f.exists() and f.read_text():
                pid = int(f.read_text())
                if not gone(pid):
                    left.append(pid)
        assert not left, f"{len(left)} of 100 programs outlived their stopped entrypoint"
    finally:
        for f in pidfiles:
            try:
                pid = int(f.read_text())
                if psutil.pid_exists(pid) and "time.sleep(60)" in " ".join(psutil.Process(pid).cmdline()):
                    os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError, psutil.Error):
                pass


def test_a_stop_as_ray_sends_it_just_after_the_start_never_leaves_the_program_running(tmp_path):
    """Ray runs the entrypoint with ``/bin/sh -c`` in a session of its own and, to stop a job it has just
    placed, sends SIGTERM to the shell and to the children the shell has at that moment, waits the stop
    grace and SIGKILLs the same processes.  A shell that forked the wrapper just after that list was taken
    used to die alone and leave the wrapper to start the program (3 of 60 starts here)."""
    import os
    import random

    import psutil

    rng = random.Random(20261202)
    pidfiles = []
    try:
        for k in range(120):
            pidfiles.append(tmp_path / f"s{k}.pid")
            code = f"import os, time; open({str(pidfiles[-1])!r}, 'w').write(str(os.getpid())); time.sleep(60)"
            p = subprocess.Popen(["/bin/sh", "-c", entrypoint(_spec(code), python=PY, cwd=None)],
                                 start_new_session=True)
            time.sleep(rng.uniform(0, 0.01))
            procs = [psutil.Process(p.pid)] + psutil.Process(p.pid).children(recursive=True)
            for q in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(q.pid, signal.SIGTERM)
            _, alive = psutil.wait_procs(procs, timeout=1.0)
            for q in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(q.pid, signal.SIGKILL)
            p.wait(timeout=20)
        time.sleep(1.0)  # a program the wrapper started would have written its pid by now
        left = [int(f.read_text()) for f in pidfiles if f.exists() and f.read_text()]
        left = [pid for pid in left if not gone(pid)]
        assert not left, f"{len(left)} of {len(pidfiles)} programs outlived their stopped job"
    finally:
        for f in pidfiles:
            with contextlib.suppress(OSError, ValueError, psutil.Error):
                pid = int(f.read_text())
                if "time.sleep(60)" in " ".join(psutil.Process(pid).cmdline()):
                    os.kill(pid, signal.SIGTERM)


def test_exit_code_of_maps_128_plus_signal():
    assert exit_code_of(137) == -9 and exit_code_of(3) == 3 and exit_code_of(None) is None and exit_code_of(255) == 255


# -- readiness and pending ---------------------------------------------------------

def test_probe_url_goes_to_the_node_unless_it_is_this_machine():
    assert probe_url("http://127.0.0.1:8000/health", None) is None
    assert probe_url("http://127.0.0.1:8000/health", "10.1.2.3", local={"127.0.0.1"}) == "http://10.1.2.3:8000/health"
    assert probe_url("http://127.0.0.1:8000/health", "10.1.2.3", local={"10.1.2.3"}) == "http://127.0.0.1:8000/health"
    assert probe_url("http://myhost:8000/", "10.1.2.3", local=set()) == "http://myhost:8000/"


def test_pending_reason_tells_resources_from_setting_up():
    waiting = JobInfo("x", "PENDING", message="Job is waiting for resources; it may be waiting for resources")
    assert pending_reason(waiting).startswith("waiting for resources")
    assert pending_reason(JobInfo("x", "PENDING", message="Runtime env is setting up.")).startswith("setting up")
    # Ray 2.60 says the same for both: the nodes' free resources decide (names in the dashboard's camelCase).
    usage = [{"GPU": (2.0, 2.0), "CPU": (0.0, 2.0)}, {"CPU": (0.0, 1.0), "nodeA": (0.0, 1.0)}]
    assert pending_reason(waiting, {"GPU": 1}, usage) == "waiting for resources: no node has GPU 1 free"
    assert pending_reason(waiting, {"node_a": 1}, usage).startswith("setting up")
    assert pending_reason(waiting, {"node_a": 1, "GPU": 1}, usage).startswith("waiting for resources")
    info = JobInfo.from_json({"submission_id": "s", "status": "RUNNING", "start_time": 1_700_000_000_000,
                              "driver_agent_http_address": "http://10.0.0.7:52365", "driver_exit_code": None})
    assert info.node_host == "10.0.0.7" and info.start_time == 1_700_000_000.0 and not info.terminal


# -- the REST client ------------------------------------------------------------

class _FakeDashboard(BaseHTTPRequestHandler):
    token = "t0k"
    seen: list = []
    jobs: dict = {}  # submission id -> the job's JSON
    logs: dict = {}  # submission id -> its driver log so far

    def log_message(self, *a):
        pass

    def _answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _auth(self):
        h = self.headers.get("Authorization")
        if h is None:
            self._answer(401, {"error": "no token"})
            return False
        if h != f"Bearer {self.token}":
            self._answer(403, {"error": "bad token"})
            return False
        return True

    def do_GET(self):
        if not self._auth():
            return
        if self.path == "/api/jobs/":
            self._answer(200, [dict(j, submission_id=k) for k, j in self.jobs.items()])
            return
        sid = self.path.split("/")[3] if self.path.startswith("/api/jobs/") else None
        if sid in self.jobs:
            if self.path.endswith("/logs"):
                self._answer(200, {"logs": self.logs.get(sid, "")})
            else:
                self._answer(200, dict(self.jobs[sid], submission_id=sid))
            return
        if self.path == "/api/version":
            self._answer(200, {"ray_version": "2.60.0"})
        elif self.path == "/api/jobs/queued1":
            self._answer(200, {"submission_id": "queued1", "status": "PENDING", "driver_exit_code": None,
                               "message": "Job is waiting for resources to be available (1 GPU)."})
        elif self.path == "/api/jobs/queued1/logs":
            self._answer(200, {"logs": ""})
        elif self.path == "/api/jobs/known":
            self._answer(200, {"submission_id": "known", "status": "FAILED", "driver_exit_code": 137,
                               "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR"})
        else:
            self._answer(404, {"error": "not found"})

    def do_POST(self):
        if not self._auth():
            return
        if self.path.endswith("/stop"):
            type(self).seen.append(("stop", self.path))
            self._answer(200, {"stopped": True})
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if body["submission_id"] == "dup":
            self._answer(500, {"error": "Job with submission_id dup already exists."})
        else:
            self._answer(200, {"submission_id": body["submission_id"], "job_id": None})


@pytest.fixture
def fake_dashboard():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _FakeDashboard)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_client_sends_bearer_token_and_reports_401_403(fake_dashboard):
    with pytest.raises(RayApiError) as e:
        RayJobsClient(fake_dashboard).version()
    assert e.value.status == 401 and "token_file" in str(e.value)
    with pytest.raises(RayApiError) as e:
        RayJobsClient(fake_dashboard, token="wrong").version()
    assert e.value.status == 403
    assert RayJobsClient(fake_dashboard, token="t0k").version()["ray_version"] == "2.60.0"


def test_client_submit_body_info_404_and_duplicate_id(fake_dashboard):
    c = RayJobsClient(fake_dashboard, token="t0k")
    assert c.submit("r1", "echo hi", env_vars={"A": "1"}, metadata={"specdeck_user": "ann"}, num_gpus=1,
                    resources={"node_a": 1}) == "r1"
    body = _FakeDashboard.seen[-1]
    assert body["entrypoint_num_gpus"] == 1 and body["entrypoint_resources"] == {"node_a": 1}
    assert body["runtime_env"] == {"env_vars": {"A": "1"}} and body["metadata"] == {"specdeck_user": "ann"}
    assert "entrypoint_num_cpus" not in body
    with pytest.raises(RayApiError) as e:
        c.submit("dup", "echo")
    assert e.value.status == 500 and "already exists" in str(e.value)
    assert c.info("nope") is None
    info = c.info("known")
    assert info.terminal and info.driver_exit_code == 137 and info.error_type == "JOB_ENTRYPOINT_COMMAND_ERROR"


def test_client_unreachable_is_one_clear_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(RayApiError) as e:
        RayJobsClient(f"http://127.0.0.1:{port}", timeout_s=2).version()
    assert e.value.unreachable and "does not answer" in str(e.value)



@pytest.mark.timeout(120)
def test_processes_page_shows_the_backend_submission_id_and_pending_reason(fake_dashboard, tmp_path, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from backend import runtime as runtime_mod
    from specdeck_types.process import ProcState
    from state.processes import ProcessRecord, ProcessRepo
    from state.store import Store
    from tests.helpers import close_runtime

    (tmp_path / "tok").write_text("t0k")
    (tmp_path / "specdeck.toml").write_text(
        f'[workspace]\nname = "raypage"\n\n[cluster]\naddress = "{fake_dashboard}"\ntoken_file = "tok"\n\n'
        f'[[process]]\nname = "queued"\nargv = ["{PY}", "-c", "print(1)"]\nwhere = "ray"\nnum_gpus = 1\n')
    spec = ProcessSpec(name="queued", kind=Kind.OTHER, argv=(PY, "-c", "print(1)"),
                       log_path=str(tmp_path / "logs" / "queued.log"), where="ray", num_gpus=1)
    store = Store(tmp_path / "state.db")
    ProcessRepo(store).upsert(ProcessRecord(name="queued", kind="other", spec=spec, state=ProcState.STARTING,
                                            state_since=time.time(), run_id="queued1", started_at=time.time(),
                                            log_path=spec.log_path, detail="submitted to Ray"))
    store.close()
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    try:
        rt = runtime_mod.get_runtime()
        wait_for(lambda: rt.supervisor.view("queued").pending, timeout_s=30, poll=rt.supervisor.poll, interval_s=0.2)
        repo = Path(__file__).resolve().parents[2]
        at = AppTest.from_file(str(repo / "app.py"), default_timeout=30)
        at.run()
        at.switch_page("app_pages/processes.py")
        at.run()
        assert not at.exception, at.exception
        table = at.table[0].value
        row = table[table["name"] == "queued"].iloc[0]
        assert row["where"] == "ray · queued1" and row["state"] == "PENDING on Ray"
        assert "waiting for resources" in row["detail"]
        at.selectbox(key="proc-selected").select("queued").run()
        assert any("Queued on the Ray cluster: waiting for resources" in i.value for i in at.info)
        assert any("on Ray, job `queued1`" in m.value for m in at.markdown)
        # Stopped while queued: ended here at once, and Ray is told to stop the job.
        v = rt.supervisor.stop("queued", actor="dana", source="test")
        assert v.state == ProcState.EXITED and "while queued on Ray" in v.detail
        assert ("stop", "/api/jobs/queued1/stop") in _FakeDashboard.seen
    finally:
        close_runtime(tmp_path)


def test_driver_log_is_copied_by_offset_once_across_supervisors_and_the_exit_recorded(fake_dashboard, tmp_path):
    from backend.supervisor.supervisor import Supervisor
    from specdeck_types.process import ProcState
    from state.processes import ProcessRecord, ProcessRepo
    from state.store import Store

    (tmp_path / "tok").write_text("t0k")
    cluster = Cluster(ClusterConfig(address=fake_dashboard, token_file="tok"), tmp_path)
    _FakeDashboard.jobs["logjob"] = {"status": "RUNNING", "driver_agent_http_address": "http://127.0.0.1:9"}
    _FakeDashboard.logs["logjob"] = "one\ntwo\n"
    log_path = tmp_path / "logs" / "lj.log"
    spec = ProcessSpec(name="lj", kind=Kind.OTHER, argv=("x",), log_path=str(log_path), where="ray")
    store = Store(tmp_path / "state.db")
    now = [time.time()]
    sups = []
    try:
        ProcessRepo(store).upsert(ProcessRecord(name="lj", kind="other", spec=spec, state=ProcState.STARTING,
                                                state_since=now[0], run_id="logjob", started_at=now[0],
                                                log_path=str(log_path)))
        sup = Supervisor(store, tmp_path / "run", clock=lambda: now[0], cluster=cluster)
        sups.append(sup)
        assert sup.view("lj").state == ProcState.RUNNING  # Ray runs it and it has no readiness probe
        assert log_path.read_text() == "one\ntwo\n"
        _FakeDashboard.logs["logjob"] += "three\n"
        now[0] += 5
        sup.poll()
        again = Supervisor(store, tmp_path / "run", clock=lambda: now[0], cluster=cluster)  # a restarted dashboard
        sups.append(again)
        now[0] += 5
        again.poll()
        assert log_path.read_text() == "one\ntwo\nthree\n"
        _FakeDashboard.logs["logjob"] += "bye\n"
        _FakeDashboard.jobs["logjob"] = {"status": "FAILED", "driver_exit_code": 3,
                                         "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR"}
        now[0] += 5
        again.poll()
        v = again.view("lj")
        assert v.state == ProcState.EXITED and v.exit_code == 3
        assert "JOB_ENTRYPOINT_COMMAND_ERROR" in v.detail and "exit code 3" in v.detail
        assert log_path.read_text() == "one\ntwo\nthree\nbye\n"
    finally:
        for x in sups:
            x.close()
        store.close()


def test_a_live_ray_job_the_store_does_not_know_is_readopted_by_its_metadata(fake_dashboard, tmp_path):
    from backend.supervisor.supervisor import Supervisor
    from specdeck_types.process import ProcState
    from state.processes import ProcessRecord, ProcessRepo
    from state.store import Store

    (tmp_path / "tok").write_text("t0k")
    cluster = Cluster(ClusterConfig(address=fake_dashboard, token_file="tok"), tmp_path)
    meta = {"specdeck_name": "orph", "specdeck_workspace": str(tmp_path), "specdeck_user": "eve"}
    _FakeDashboard.jobs["orphan-old"] = {"status": "RUNNING", "metadata": meta, "start_time": 1_000}
    _FakeDashboard.jobs["orphan-new"] = {"status": "RUNNING", "metadata": meta, "start_time": 2_000,
                                         "driver_agent_http_address": "http://127.0.0.1:9"}
    _FakeDashboard.jobs["elsewhere"] = {"status": "RUNNING", "metadata": dict(meta, specdeck_workspace="/other")}
    spec = ProcessSpec(name="orph", kind=Kind.OTHER, argv=("x",), log_path=str(tmp_path / "logs" / "o.log"),
                       where="ray")
    store = Store(tmp_path / "state.db")
    repo = ProcessRepo(store)
    try:
        repo.upsert(ProcessRecord(name="orph", kind="other", spec=spec, state=ProcState.NEVER, state_since=0.0,
                                  log_path=spec.log_path))
        # orphan-old is a run Specdeck already ended (stopped while queued): never taken back
        repo.transition("orph", ProcState.STARTING, at=1.0, run_id="orphan-old")
        repo.transition("orph", ProcState.EXITED, at=2.0, run_id="orphan-old", detail="stopped while queued")
        repo.transition("orph", ProcState.STARTING, at=3.0, run_id="orphan-older")
        repo.transition("orph", ProcState.EXITED, at=4.0, run_id="orphan-older")
        sup = Supervisor(store, tmp_path / "run", cluster=cluster)
        try:
            v = sup.view("orph")
            assert v.submission_id == "orphan-new" and v.state == ProcState.RUNNING
            assert any("re-adopted from Ray: job orphan-new" in e.detail for e in sup.history("orph"))
        finally:
            sup.close()
    finally:
        for k in ("orphan-old", "orphan-new", "elsewhere"):
            _FakeDashboard.jobs.pop(k, None)
        store.close()
