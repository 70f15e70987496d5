"""A full disk under a benchmark's job folder: the job ends failed saying "no space left on device in
FOLDER", its progress file ends in that final state (in the room set aside for it), ``bench run`` says
it and exits 1; a job whose process ended with its file still saying running shows as failed on the
page; the free-space alert of the output folders."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import diskspace, runtime as runtime_mod
from backend.bench.client import Load
from backend.filemodes import write_private as real_write_private
from backend.flows import bench_job
from backend.flows.bench_job import read_progress, run_job
from backend.flows.bench_runner import Target
from tests.sim.simproc import start_sim_thread
from tests.simws import make_models


class SmallDisk:
    """The job folder as a small disk: ``write_private`` refuses with ENOSPC what would not fit once
    :meth:`fill` has fixed its capacity at what is stored there; every file in the folder counts."""

    def __init__(self, root: Path, full_when):
        self.root, self.full_when, self.capacity = root, full_when, None

    def used(self) -> int:
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())

    def write(self, path, data, **kw) -> None:
        size = len(data.encode() if isinstance(data, str) else data)
        if self.capacity is None and self.full_when(data):
            self.capacity = self.used()
        if self.capacity is not None and self.used() + size > self.capacity:  # the temporary file beside it
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write_private(path, data, **kw)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    target, draft = make_models(tmp_path_factory.mktemp("models"))
    s = start_sim_thread(["--model-path", str(target)], tmp_path_factory.mktemp("sim") / "server.log",
                         {"SPECDECK_SIM_SPEED": "200", "SPECDECK_SIM_BASELINE_TOK_S": "300"})
    s.wait_ready(60)
    yield s
    s.stop()


def _running_with_answers(data) -> bool:
    d = json.loads(data)
    return d.get("phase") == "running" and d.get("done", 0) >= 2


@pytest.mark.timeout(120)
def test_a_full_disk_mid_run_ends_the_job_failed_and_says_so(sim, tmp_path, monkeypatch):
    job = tmp_path / "job"
    disk = SmallDisk(job, _running_with_answers)
    monkeypatch.setattr(bench_job, "write_private", disk.write)
    progress = job / "progress.json"
    stored: list = []
    final, results = run_job(Target(sim.base, name="sim"), [Load(concurrency=1, num_prompts=12, input_len=16,
                                                                  output_len=64)],
                             mode="builtin", work_dir=job, store=stored.append, progress_path=progress)
    assert disk.capacity is not None, "the disk never filled: the test measured nothing"
    p = read_progress(progress)
    assert p is not None and p.state == "failed", f"the progress file still says {p and p.state}"
    assert p.error == f"no space left on device in {job}"
    assert final.state == "failed" and final.error == p.error
    assert results == [] and stored == []
    assert not (job / ".progress.json.reserve").exists()  # given up for the final state


@pytest.mark.timeout(60)
def test_a_disk_full_from_the_start_still_ends_in_a_final_state(tmp_path, monkeypatch):
    def refuse(path, data, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(bench_job, "write_private", refuse)
    progress = tmp_path / "job" / "progress.json"
    final, _ = run_job(Target("http://127.0.0.1:9", name="x"), [Load(num_prompts=2)], mode="builtin",
                       work_dir=tmp_path / "job", store=lambda r: r, progress_path=progress)
    p = read_progress(progress)  # written over in place when no temporary file fits
    assert final.state == p.state == "failed"
    assert p.error == f"no space left on device in {progress.parent}"


def test_disk_error_and_the_threshold(tmp_path, monkeypatch):
    assert diskspace.disk_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path) == \
        f"no space left on device in {tmp_path}"
    assert diskspace.disk_error(OSError(errno.ENOSPC, "x", str(tmp_path / ".p.json.1.tmp"))) == \
        f"no space left on device in {tmp_path}"
    monkeypatch.setenv(diskspace.ENV, "0.5")
    assert diskspace.min_free_bytes() == diskspace.GB // 2
    monkeypatch.setenv(diskspace.ENV, "nonsense")
    assert diskspace.min_free_bytes() == int(diskspace.DEFAULT_MIN_FREE_GB * diskspace.GB)
    free = diskspace.space(tmp_path).free
    (low,) = diskspace.low_space([tmp_path / "not" / "yet", tmp_path], min_free=free + diskspace.GB)
    assert low.low and low.measured_at == tmp_path and "GiB free" in low.describe()
    assert diskspace.low_space([tmp_path], min_free=0) == []


# -- the page -----------------------------------------------------------------------------------

PAGE = """
from ui.context import runtime
from ui.bench.run import live_progress, space_alert

space_alert(runtime())
live_progress(runtime())
"""

# A job that wrote "running", said why it failed on stderr and exited 1: what a job does whose
# final state found no room at all.
DIES = ("import json, pathlib, sys\n"
        "p = pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True)\n"
        "p.write_text(json.dumps({'server': 'spec', 'mode': 'builtin', 'loads': [{'concurrency': 1}],"
        " 'state': 'running', 'phase': 'running', 'done': 3, 'total': 10}))\n"
        "sys.stderr.write('error: benchmark of spec failed after 0 of 1 load(s): no space left on device in '"
        " + str(p.parent) + '\\n')\n"
        "sys.exit(1)\n")


@pytest.fixture
def page_ws(tmp_path, monkeypatch):
    from tests.bench.sweep_kit import write_workspace

    target, draft = make_models(tmp_path / "models")
    root = write_workspace(tmp_path / "ws", target, draft)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(root))
    yield root
    runtime_mod.close_all()


@pytest.mark.timeout(120)
def test_a_job_that_died_with_its_file_running_shows_as_failed(page_ws, monkeypatch):
    from specdeck_types.process import Kind, ProcessSpec, RestartPolicy
    from tests.helpers import wait_for

    monkeypatch.setenv(diskspace.ENV, "1000000")  # every disk is below a million GB: the alert shows
    at = AppTest.from_string(PAGE, default_timeout=60)
    at.run()
    (rt,) = set(runtime_mod._runtimes.values())
    progress = rt.workspace.outputs_dir / "bench" / "spec-t1" / "progress.json"
    spec = ProcessSpec(name="bench-spec-t1", kind=Kind.BENCHMARK, argv=(sys.executable, "-c", DIES, str(progress)),
                       log_path=str(rt.workspace.logs_dir / "bench-spec-t1.log"), restart=RestartPolicy("never"))
    rt.start_job(spec, {"kind": "bench", "server": "spec", "run_id": "t1", "progress": str(progress)},
                 actor="tester", source="test")

    def ended():
        rt.supervisor.poll()
        v = rt.supervisor.view(spec.name)
        return v is not None and v.state.is_terminal

    wait_for(ended, 30, "the job to end")
    at.run()
    assert not at.exception
    texts = " ".join(e.value for e in at.error)
    assert "The benchmark failed" in texts and f"no space left on device in {progress.parent}" in texts
    assert [m.value for m in at.metric if m.label == "state"] == ["FAILED"]
    assert any("Low disk space" in w.value for w in at.warning)
