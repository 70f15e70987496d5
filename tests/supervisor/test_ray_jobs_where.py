"""``where = "ray"`` for regeneration jobs, benchmark jobs and training runs.

Against one real local Ray head for the whole module (tests/supervisor/ray_fixtures.py): ``regen run
--where ray`` against a simulated server submits the run as a Ray job that finishes every row exactly once
with its log in logs/; ``bench run --where ray`` submits a benchmark of a simulated server that records its
result.  Without Ray: the training spec of a ``[[train]]`` with ``where = "ray"`` asks Ray for its GPUs,
``--where ray`` without a [cluster] is an error naming the flag or field, and the test fleet's teardown
stops the Ray jobs before the head they need."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.flows.workspace import load_workspace
from backend.supervisor.adhoc import load_jobs
from backend.supervisor.supervisor import Supervisor
from specdeck_types.process import ProcState as S
from state.bench import BenchStore
from state.store import Store
from tests.helpers import free_port
from tests.regen.jobkit import FAST_SIM, SimServer, read_jsonl, write_rows
from tests.simws import make_models, stop_live
from tests.supervisor.conftest import wait_for
from tests.supervisor.ray_fixtures import ray_head
from tests.supervisor.test_ray_helpers import cli, needs_ray

PY = sys.executable


@pytest.fixture(scope="module")
def models():
    base = Path(tempfile.mkdtemp(prefix="sdwhere-models-"))
    try:
        yield make_models(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def ray(models):
    from backend.flows.tiny.demo_data import write_demo_data
    from backend.flows.tiny.target import make_target

    base = models[0].parent
    tiny = make_target(base / "tiny-target", "tiny")
    data = write_demo_data(base / "tiny.jsonl", rows=16)
    env = ", ".join(f"{k} = {json.dumps(v)}" for k, v in FAST_SIM.items())
    config = textwrap.dedent(f"""\
        [[server]]
        name = "sim"
        model_path = {json.dumps(str(models[0]))}
        port = {free_port()}
        simulate = true
        env = {{ {env} }}

        # the project's CPU trainer, 4 steps, as a Ray job asking for one (fake) GPU
        [[train]]
        name = "tiny"
        python = {json.dumps(PY)}
        generation = "gen2"
        entry = "module:backend.flows.tiny train"
        target_model = {json.dumps(str(tiny))}
        train_data = {json.dumps(str(data))}
        num_epochs = 1
        batch_size = 4
        learning_rate = 1e-2
        max_length = 96
        ttt_length = 3
        extra_args = ["--device", "cpu", "--size", "tiny"]
        stop_grace_s = 5
        where = "ray"
        """)
    with ray_head(config) as rc:
        yield rc


@pytest.fixture
def follow(ray):
    """A supervisor on the workspace's store that follows the jobs the command line saved; those still
    live are stopped at the end (the module's Ray head, a process of the same store, is left to its fixture)."""
    ws = load_workspace(str(ray.root))
    store = Store(ws.store_path)
    sup = Supervisor(store, ws.run_dir, default_cwd=ws.root)

    adopted: list[str] = []

    def track(name: str) -> None:
        adopted.append(name)

    def adopt(name: str):
        job = next(j for j in load_jobs(ws.run_dir) if j.name == name)
        adopted.append(name)
        sup.sync_specs([job.spec], prune=False)
        return job

    sup.adopt = adopt  # type: ignore[attr-defined]
    sup.track = track  # type: ignore[attr-defined]
    sup.ws = ws  # type: ignore[attr-defined]
    try:
        yield sup
    finally:
        try:
            for name in adopted:
                v = sup.view(name)
                if v is not None and v.live:
                    sup.stop(name, actor="test", source="teardown", wait=True)
        finally:
            sup.close()
            store.close()


def _ended(sup: Supervisor, name: str) -> bool:
    v = sup.view(name)
    return v is not None and v.state in (S.EXITED, S.FATAL, S.UNKNOWN)


def _log(path) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_regen_run_where_ray_finishes_every_row_once_with_its_log_in_logs(ray, follow, monkeypatch):
    root = ray.root
    monkeypatch.chdir(root)  # the paths are given relative to here; the job runs elsewhere
    sim = SimServer(root / "logs").start()
    try:
        inp = root / "rows.jsonl"
        ids = write_rows(inp, 40, multi_every=5)
        out = root / "out" / "ray-rows.jsonl"
        out.parent.mkdir(exist_ok=True)
        code, said, err = cli(root, "regen", "run", "--input", "rows.jsonl", "--server", sim.url, "--out",
                              "out/ray-rows.jsonl",
                              "--concurrency", "4", "--max-tokens", "16", "--no-stream", "--where", "ray")
        assert code == 0, err
        assert "regen-ray-rows: STARTING on the Ray cluster as job " in said, said
        job = follow.adopt("regen-ray-rows")
        # the job's spec: the same run (no --where: on its node it runs in the foreground), on Ray, no GPU
        assert job.spec.where == "ray" and job.spec.num_gpus == 0.0
        assert "--where" not in job.spec.argv and {"--no-stream", "--max-tokens"} <= set(job.spec.argv)
        assert {str(inp), str(out)} <= set(job.spec.argv)  # made absolute
        assert job.meta["kind"] == "regen" and job.meta["out"] == str(out)
        wait_for(lambda: _ended(follow, "regen-ray-rows"), timeout_s=240, poll=follow.poll, interval_s=0.5)
        v = follow.view("regen-ray-rows")
        assert (v.state, v.exit_code, v.backend) == (S.EXITED, 0, "ray"), (v.state, v.detail, _log(v.spec.log_path))
        assert v.submission_id
        rows = read_jsonl(out)
        counted = Counter(r["id"] for r in rows)
        assert set(counted) == set(ids) and set(counted.values()) == {1}, counted
        assert all(r["conversations"][-1]["role"] == "assistant" for r in rows)
        log = root / "logs" / "regen-ray-rows.log"
        assert Path(v.spec.log_path) == log
        wait_for(lambda: "done" in _log(log) and "regen start" in _log(log), timeout_s=60, poll=follow.poll,
                 interval_s=0.5)
    finally:
        sim.stop()


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_bench_run_where_ray_records_its_result(ray, follow):
    root = ray.root
    code, said, err = cli(root, "processes", "start", "sim")
    assert code == 0, err
    try:
        wait_for(lambda: follow.view("sim") is not None and follow.view("sim").state == S.RUNNING, timeout_s=120,
                 poll=follow.poll, interval_s=0.3)
        before = len(BenchStore(follow.store).list())
        code, said, err = cli(root, "bench", "run", "sim", "--builtin", "--concurrency", "2", "--num-prompts", "6",
                              "--input-len", "16", "--output-len", "16", "--where", "ray")
        assert code == 0, err
        name = said.split(":", 1)[0]
        assert name.startswith("bench-sim-") and "on the Ray cluster as job " in said, said
        job = follow.adopt(name)
        assert job.spec.where == "ray" and job.spec.num_gpus == 0.0
        assert job.meta["kind"] == "bench" and job.meta["server"] == "sim"
        wait_for(lambda: _ended(follow, name), timeout_s=240, poll=follow.poll, interval_s=0.5)
        v = follow.view(name)
        assert (v.state, v.exit_code, v.backend) == (S.EXITED, 0, "ray"), (v.state, v.detail, _log(v.spec.log_path))
        results = BenchStore(follow.store).list()
        assert len(results) == before + 1
        r = results[0]
        assert (r.server, r.source, r.load.concurrency, r.results.completed) == ("sim", "run", 2, 6)
        progress = json.loads(Path(job.meta["progress"]).read_text())
        assert progress["state"] == "done"
        assert (root / "logs" / f"{name}.log").exists()
    finally:
        cli(root, "processes", "stop", "sim")


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_tiny_cpu_training_run_on_ray_gets_its_gpu_and_trains(ray, follow):
    from backend.train.checkpoints import list_checkpoints
    from backend.train.reader import TrainLogReader
    from backend.train.runs import TrainRuns

    runs = TrainRuns(follow.ws, follow)
    spec = runs.spec("tiny")
    assert (spec.where, spec.num_gpus) == ("ray", 1.0) and "CUDA_VISIBLE_DEVICES" not in spec.env
    follow.track("tiny")
    runs.start("tiny", actor="test", source="test")
    wait_for(lambda: _ended(follow, "tiny"), timeout_s=300, poll=follow.poll, interval_s=0.5)
    v = follow.view("tiny")
    log = ray.root / "logs" / "tiny.log"
    assert (v.state, v.exit_code, v.backend) == (S.EXITED, 0, "ray"), (v.state, v.detail, _log(log)[-3000:])
    # a job asking one GPU (the head has two fake ones) that Ray ran to the end
    assert ray.client.info(v.submission_id).status == "SUCCEEDED"
    wait_for(lambda: any(r.source == "bar" and r.step == 4 for r in TrainLogReader(log).read_all()), timeout_s=60,
             poll=follow.poll, interval_s=0.5)
    assert list_checkpoints(runs.output_dir("tiny")).checkpoints, _log(log)[-2000:]


# -- without Ray ------------------------------------------------------------------------------------------


TRAIN = """\
[workspace]
name = "where"
{cluster}
[[train]]
name = "tiny"
python = "{py}"
generation = "gen2"
entry = "module:backend.flows.tiny train"
target_model = "/models/target"
train_data = "data.jsonl"
gpus = [0, 1, 2, 3]
tp_size = 2
where = "{where}"
"""
CLUSTER = '[cluster]\nkind = "ray"\naddress = "local"\nnum_gpus = 4\n'


def _train_ws(root: Path, where: str, cluster: bool):
    root.mkdir(parents=True, exist_ok=True)
    (root / "data.jsonl").write_text('{"id": "1", "conversations": []}\n')
    (root / "specdeck.toml").write_text(TRAIN.format(cluster=CLUSTER if cluster else "", py=PY, where=where))
    return load_workspace(str(root))


def test_training_spec_on_ray_asks_ray_for_its_gpus_and_leaves_cuda_visible_devices_to_it(tmp_path):
    from backend.train.runs import TrainRuns

    local = TrainRuns(_train_ws(tmp_path / "local", "local", True), supervisor=None).specs()
    on = TrainRuns(_train_ws(tmp_path / "ray", "ray", True), supervisor=None).specs()
    assert [s.name for s in local] == [s.name for s in on] == ["tiny"]
    here, there = local[0], on[0]
    assert (here.where, here.num_gpus, here.env.get("CUDA_VISIBLE_DEVICES")) == ("local", 0.0, "0,1,2,3")
    # on Ray: one GPU per process (4 GPUs: data parallel 2 x tensor parallel 2), Ray picks which
    assert (there.where, there.num_gpus, there.on_ray) == ("ray", 4.0, True)
    assert "CUDA_VISIBLE_DEVICES" not in there.env
    assert there.argv[:4] == here.argv[:4] and len(there.argv) == len(here.argv)
    # what the page shows before a start is what runs
    shown = TrainRuns(_train_ws(tmp_path / "ray", "ray", True), supervisor=None).command("tiny", check=False)
    assert "CUDA_VISIBLE_DEVICES" not in shown.env
    assert ("on the Ray cluster: a job asking for 4 GPU(s); Ray sets CUDA_VISIBLE_DEVICES to the ones it grants "
            "(gpus = [0, 1, 2, 3] gives the count only)") in shown.notes


def test_training_where_ray_without_a_cluster_names_the_line_and_field(tmp_path):
    from backend.workspace import ConfigError

    with pytest.raises(ConfigError) as got:
        _train_ws(tmp_path, "ray", False)
    assert f"{tmp_path / 'specdeck.toml'}:13: train[0].where: \"ray\" needs a [cluster]" in str(got.value)


def test_where_ray_without_a_cluster_is_an_error_naming_the_flag(tmp_path, models, capsys):
    from backend.flows.bench_job import bench_process_spec

    root = tmp_path / "ws"
    root.mkdir()
    (root / "specdeck.toml").write_text(textwrap.dedent(f"""\
        [workspace]
        name = "nocluster"

        [[server]]
        name = "sim"
        model_path = {json.dumps(str(models[0]))}
        port = {free_port()}
        simulate = true
        """))
    inp = root / "rows.jsonl"
    write_rows(inp, 2)
    code, _, err = cli(root, "regen", "run", "--input", str(inp), "--server", "http://127.0.0.1:9",
                       "--out", str(root / "o.jsonl"), "--where", "ray")
    err += capsys.readouterr().err  # regen writes its errors to the process's stderr
    assert code == 2 and "--where ray" in err and "has no [cluster] section" in err, err
    assert not (root / "o.jsonl").exists() and not (root / "run" / "jobs").exists()
    code, _, err = cli(root, "bench", "run", "sim", "--builtin", "--where", "ray")
    assert code == 1 and "--where ray" in err and "has no [cluster] section" in err, err
    with pytest.raises(ValueError, match=r'^where: "ray" needs a \[cluster\] section'):
        bench_process_spec(load_workspace(str(root)), "sim", "x", [], where="ray")


def test_regen_job_spec_from_the_page_carries_where(tmp_path):
    from backend.regen.control import FormError, RunForm, job_spec

    inp = tmp_path / "rows.jsonl"
    write_rows(inp, 2)
    form = RunForm(out="o.jsonl", servers=("http://127.0.0.1:9",), inputs=(str(inp),), where="ray")
    spec, meta = job_spec(form, tmp_path, tmp_path / "logs")
    assert (spec.where, spec.num_gpus, spec.name) == ("ray", 0.0, "regen-o")
    assert "--where" not in spec.argv and meta["out"] == str(tmp_path / "o.jsonl")
    assert job_spec(RunForm(out="o.jsonl", servers=("http://127.0.0.1:9",), inputs=(str(inp),)),
                    tmp_path, tmp_path / "logs")[0].where == "local"
    with pytest.raises(FormError, match="run on"):
        job_spec(RunForm(out="o.jsonl", servers=("u",), inputs=(str(inp),), where="moon"), tmp_path, tmp_path)


class _Sup:
    """What stop_live asks of a supervisor: its views and stop; records the order of the stops."""

    def __init__(self, views, fail=()):
        self._views, self.fail, self.stopped = views, set(fail), []

    def views(self):
        return self._views

    def stop(self, name, **kw):
        self.stopped.append(name)
        if name in self.fail:
            raise RuntimeError(f"{name}: Ray not reachable")


def _view(name, ray_job, live=True):
    return SimpleNamespace(name=name, live=live, spec=SimpleNamespace(on_ray=ray_job))


def test_fleet_teardown_stops_the_ray_jobs_before_the_head():
    # the supervisor lists the head first (it was started first); the Ray jobs are stopped before it
    sup = _Sup([_view("ray-head", False), _view("server-a", False), _view("job-1", True), _view("done", True, False),
                _view("job-2", True)])
    assert stop_live(sup) == ["job-1", "job-2", "ray-head", "server-a"]
    assert sup.stopped == ["job-1", "job-2", "ray-head", "server-a"]
    # one failing stop does not leave the rest running; the failure is raised at the end
    sup = _Sup([_view("ray-head", False), _view("job-1", True), _view("job-2", True)], fail={"job-1"})
    with pytest.raises(RuntimeError, match="job-1: Ray not reachable"):
        stop_live(sup)
    assert sup.stopped == ["job-1", "job-2", "ray-head"]


def _regen_page(root: Path, monkeypatch, cluster: bool):
    from streamlit.testing.v1 import AppTest

    (root / "datasets").mkdir(parents=True)
    (root / "datasets" / "code.jsonl").write_text("".join(
        json.dumps({"id": f"c{i}", "prompt": f"question {i}"}) + "\n" for i in range(3)))
    (root / "specdeck.toml").write_text(
        '[workspace]\nname = "runon"\n\n' + (CLUSTER + "\n" if cluster else "")
        + '[[dataset]]\nname = "code"\nsource = "hand"\nfile = "datasets/code.jsonl"\n\n[[mix]]\nname = "m"\n'
          'dataset = "code"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(root))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/regeneration.py")
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.timeout(180)
def test_regeneration_form_offers_run_on_only_with_a_cluster_and_the_review_says_ray(tmp_path, monkeypatch):
    from tests.helpers import close_runtime

    try:
        at = _regen_page(tmp_path / "plain", monkeypatch, cluster=False)
        assert "regen-f-where" not in {r.key for r in at.radio}
    finally:
        close_runtime(tmp_path / "plain")
    try:
        at = _regen_page(tmp_path / "cl", monkeypatch, cluster=True)
        run_on = at.radio(key="regen-f-where")
        assert run_on.label == "Run on" and run_on.value == "local"
        run_on.set_value("ray")  # a field of the form: sent with Review
        at.text_input(key="regen-f-urls").input("http://127.0.0.1:30011")
        next(b for b in at.button if b.label == "Review").click()
        at.run()
        assert not at.exception, at.exception
        said = " ".join(m.value for m in at.markdown)
        assert "will run as a supervised process on the Ray cluster" in said, said
    finally:
        close_runtime(tmp_path / "cl")


@pytest.mark.timeout(180)
def test_training_form_offers_run_on_with_a_cluster_and_saves_where_ray(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.helpers import close_runtime
    from tests.train.page_kit import page

    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "train-runon"\n\n' + CLUSTER)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    form = "train-form-new"
    try:
        at = page(AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=60))
        where = at.selectbox(key=f"{form}-where")
        assert where.label == "Run on" and where.value == "local"
        for key, value in (("name", "tr"), ("target-typed", "/models/t"), ("data-typed", "data.jsonl"),
                           ("entry", "module:backend.flows.tiny train"), ("gpus", "0,1")):
            at.text_input(key=f"{form}-{key}").input(value)
        at.selectbox(key=f"{form}-gen").set_value("gen2")
        where.set_value("ray")
        next(b for b in at.button if b.label == "Review").click()
        at.run()
        assert not at.exception, at.exception
        said = " ".join(m.value for m in at.markdown)
        assert "run on the Ray cluster, asking it for 2 GPUs as:" in said, said
        at.button(key=f"{form}-save").click().run()
        assert '\nwhere = "ray"\n' in (tmp_path / "specdeck.toml").read_text()
    finally:
        close_runtime(tmp_path)


@pytest.mark.timeout(180)
def test_benchmarks_form_offers_run_on_only_with_a_cluster(tmp_path, monkeypatch, models):
    from tests.helpers import close_runtime, open_page

    for name, cluster in (("plain", ""), ("cl", CLUSTER)):
        root = tmp_path / name
        root.mkdir()
        (root / "specdeck.toml").write_text(
            f'[workspace]\nname = "bench-{name}"\n\n[telemetry]\nsource = "fake"\n\n{cluster}\n[[server]]\n'
            f'name = "sim"\nmodel_path = {json.dumps(str(models[0]))}\nport = {free_port()}\nsimulate = true\n')
        monkeypatch.setenv("SPECDECK_WORKSPACE", str(root))
        try:
            at = open_page("app_pages/benchmarks.py", 90, tab="Run a benchmark")
            radios = {r.key: r for r in at.radio}
            if cluster:
                assert radios["bench-f-where"].label == "Run on" and radios["bench-f-where"].value == "local"
                assert radios["bench-f-where"].options == ["this machine", "the Ray cluster"]
            else:
                assert "bench-f-where" not in radios and "bench-f-mode" in radios
        finally:
            close_runtime(root)


def test_args_argv_gives_back_the_options_parsed():
    from backend.cli import build_parser
    from backend.regen.control import args_argv

    line = ["regen", "run", "--input", "a.jsonl", "--input", "b.jsonl", "--server", "u1", "--server", "u2", "--out",
            "o.jsonl", "--concurrency", "3", "--temperature", "0.5", "--no-stream", "--reasoning", "save",
            "--where", "ray"]
    args = build_parser(line).parse_args(line)
    again = args_argv(args.run_parser, args, ("where", "workspace"))
    assert again == ["--input", "a.jsonl", "--input", "b.jsonl", "--server", "u1", "--server", "u2", "--out",
                     "o.jsonl", "--concurrency", "3", "--temperature", "0.5", "--reasoning", "save", "--no-stream"]
    back = build_parser(["regen", "run", *again]).parse_args(["regen", "run", *again])
    for key in ("input", "server", "out", "concurrency", "temperature", "stream", "reasoning", "max_tokens"):
        assert getattr(back, key) == getattr(args, key), key
    assert back.where == "local"
