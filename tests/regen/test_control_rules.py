"""The regeneration's controls as the domain decides them (backend.regen.control): which actions a job
allows in which state, what pause, resume, requeue and stop do, every one through the runtime with the
caller; requeue in this process, without a subprocess.  And the run's limits, one definition for the
command line and the start form."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from backend.regen import control
from backend.regen.config import JobConfig, Sampling, ServerSpec
from backend.regen.output import RunFiles, encode, error_record
from backend.regen.progress import ProgressLog
from backend.supervisor.adhoc import AdhocJob

STATES = (None, "starting", "running", "waiting", "pausing", "stopping", "paused", "stopped", "done", "failed")


@dataclass
class View:
    name: str
    live: bool


def _c(state, *, failed=0, job=False, view=None, job_json=False) -> control.Controls:
    j = AdhocJob(control.resume_spec(Path("/o/x.jsonl"), Path("/ws"), Path("/ws/logs"))[0]) if job else None
    return control.Controls(out="/o/x.jsonl", name="regen-x", state=state, failed=failed, job=j,
                            view=None if view is None else View("regen-x", view), has_job_json=job_json)


@pytest.mark.parametrize("state", STATES)
def test_pause_only_while_the_job_submits_rows(state):
    running = state in ("starting", "running", "waiting")
    assert _c(state, job=True, view=True).can_pause is running
    assert _c(state).can_pause is running  # started elsewhere: its control file works all the same
    assert not _c(state, job=True, view=False).can_pause  # our process ended: a stale snapshot is not a job


@pytest.mark.parametrize("state", STATES)
def test_requeue_only_with_failed_rows_and_no_job_writing(state):
    idle = state not in control.LIVE_STATES
    assert _c(state, failed=3, job=True, view=False).can_requeue is idle
    assert _c(state, failed=3).can_requeue is idle
    assert not _c(state, failed=0, job=True, view=False).can_requeue
    assert not _c(state, failed=3, job=True, view=True).can_requeue


@pytest.mark.parametrize("state", STATES)
def test_resume_when_not_running_not_done_and_the_command_is_known(state):
    assert _c(state, job=True, view=False).can_resume is (state != "done")
    assert _c(state, job_json=True).can_resume is (state != "done")
    assert not _c(state).can_resume  # neither our job nor a .job.json: nothing to run again
    assert not _c(state, job=True, view=True).can_resume


def test_stop_only_for_a_process_the_dashboard_runs():
    assert _c("running", job=True, view=True).can_stop
    assert not _c("running", job=True, view=False).can_stop
    assert not _c("running").can_stop
    assert _c("running").started_elsewhere and not _c("running", job=True, view=True).started_elsewhere
    assert not _c("paused").started_elsewhere


@dataclass
class FakeRuntime:
    """What the controls ask of the runtime, recorded: every action with its actor and source."""

    root: Path
    jobs_: list = field(default_factory=list)
    views: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)

    @property
    def workspace(self):
        return type("W", (), {"root": self.root, "logs_dir": self.root / "logs"})()

    @property
    def supervisor(self):
        return type("S", (), {"view": lambda _, name: self.views.get(name)})()

    def jobs(self):
        return list(self.jobs_)

    def act(self, action, target, fn, *, actor, source):
        ok, text = fn()
        self.calls.append(("act", action, target, actor, source, ok, text))
        return ok, text

    def start(self, name, *, actor, source):
        self.calls.append(("start", name, actor, source))

    def start_job(self, spec, meta, *, actor, source):
        self.calls.append(("start_job", spec, meta, actor, source))

    def stop(self, name, *, actor, source):
        self.calls.append(("stop", name, actor, source))


def _failed_run(tmp_path: Path, n: int = 2) -> RunFiles:
    files = RunFiles.of(tmp_path / "out" / "rq.jsonl")
    files.out.parent.mkdir(parents=True)
    files.out.write_bytes(b"")
    files.error.write_bytes(b"".join(encode(error_record(f"r{i}", {"id": f"r{i}", "conversations": []},
                                                         "HTTP 400: too long", {"class": "context_length"}))
                                     for i in range(n)))
    files.progress.write_text(json.dumps({"t": 1.0, "state": "done", "failed": n}) + "\n")
    return files


def test_controls_read_the_job_its_process_and_the_job_file(tmp_path):
    files = _failed_run(tmp_path)
    out = str(files.out)
    rt = FakeRuntime(tmp_path)
    c = control.controls(rt, out, {"state": "done", "failed": 2})
    assert (c.name, c.job, c.view, c.failed, c.has_job_json) == ("regen-rq", None, None, 2, False)
    assert c.can_requeue and not c.can_resume
    spec, meta = control.resume_spec(files.out, tmp_path, tmp_path / "logs")
    rt.jobs_.append(AdhocJob(spec, {"kind": "regen", "out": out}))
    rt.views[spec.name] = View(spec.name, True)
    files.job.write_text("{}")
    c = control.controls(rt, out, {"state": "running", "failed": 2})
    assert c.job is rt.jobs_[0] and c.live and c.has_job_json and c.can_pause and c.can_stop
    assert control.controls(rt, out, None).state is None


def test_requeue_runs_in_this_process_and_moves_the_error_rows_back(tmp_path, monkeypatch):
    def no_subprocess(*a, **k):
        raise AssertionError("requeue must not run a subprocess")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    monkeypatch.setattr(subprocess, "run", no_subprocess)
    files = _failed_run(tmp_path, 3)
    rt = FakeRuntime(tmp_path)
    c = control.controls(rt, str(files.out), {"state": "done", "failed": 3})
    text = control.requeue(rt, c, actor="alice", source="dashboard")
    assert text == f"3 failed rows moved back to the queue of {files.out}; the next regen run asks them again"
    assert files.error.read_text() == ""
    assert rt.calls == [("act", "requeue", "regen-rq", "alice", "dashboard", True, text)]


def test_requeue_is_refused_while_a_job_holds_the_output_and_moves_nothing(tmp_path):
    files = _failed_run(tmp_path)
    before = files.error.read_bytes()
    rt = FakeRuntime(tmp_path)
    c = control.controls(rt, str(files.out), {"state": "done", "failed": 2})
    log = ProgressLog(files.progress)
    try:
        with pytest.raises(control.Refused, match="a job is running on .*rq.jsonl; pause it first"):
            control.requeue(rt, c, actor="alice", source="dashboard")
    finally:
        log.close()
    assert files.error.read_bytes() == before
    assert rt.calls[0][:2] == ("act", "requeue") and rt.calls[0][5] is False  # audited as an error
    assert control.requeue_failed(files.out, "context_length") == (
        True, f"2 failed rows of class context_length moved back to the queue of {files.out}; "
              "the next regen run asks them again")


def test_a_requeue_holds_the_run_lock_so_no_job_starts_meanwhile(tmp_path, monkeypatch):
    from backend.regen import output
    from backend.regen.progress import RunLocked

    files = _failed_run(tmp_path)
    seen = []

    def requeue(f, cls):
        with pytest.raises(RunLocked):
            ProgressLog(files.progress)
        seen.append(cls)
        return 0

    monkeypatch.setattr(output, "requeue", requeue)
    assert control.requeue_failed(files.out)[0] and seen == [None]
    ProgressLog(files.progress).close()  # let go after


def test_pause_resume_and_stop_go_through_the_runtime_with_the_caller(tmp_path):
    files = _failed_run(tmp_path)
    out = str(files.out)
    rt = FakeRuntime(tmp_path)
    c = control.controls(rt, out, {"state": "paused", "failed": 0})
    control.pause(rt, c, actor="bob", source="dashboard")
    assert files.control.read_text() == "pause\n"
    assert rt.calls[-1][:5] == ("act", "pause", "regen-rq", "bob", "dashboard")
    # a run started elsewhere: a new job that runs with the output's .job.json
    control.resume(rt, c, actor="bob", source="dashboard")
    kind, spec, meta, who, source = rt.calls[-1]
    assert (kind, spec.name, who, source) == ("start_job", "regen-rq", "bob", "dashboard")
    assert spec.argv[-2:] == ("--out", out) and meta["out"] == out
    # the dashboard's own job: started again as it was
    rt.jobs_.append(AdhocJob(spec, meta))
    rt.views[spec.name] = View(spec.name, False)
    c = control.controls(rt, out, {"state": "paused"})
    control.resume(rt, c, actor="bob", source="dashboard")
    assert rt.calls[-1] == ("start", "regen-rq", "bob", "dashboard")
    control.stop(rt, c, actor="bob", source="dashboard")
    assert rt.calls[-1] == ("stop", "regen-rq", "bob", "dashboard")


def test_the_limits_are_one_definition_for_the_command_line_and_the_form(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text("")
    names = [f for f in Sampling.__dataclass_fields__]
    assert names == ["concurrency", "max_tokens", "temperature", "top_p", "reasoning", "system_prompt"]
    form = control.RunForm(out="o.jsonl", servers=("s",), inputs=(str(inp),))
    cfg = JobConfig(out=tmp_path / "o.jsonl", servers=[ServerSpec("http://s")], inputs=[str(inp)])
    assert all(getattr(form, n) == getattr(cfg, n) for n in names)  # the same defaults
    for bad, why in (({"concurrency": 0}, "concurrency: 0 is not >= 1"),
                     ({"max_tokens": 0}, "max_tokens: 0 is not >= 1"),
                     ({"temperature": 3.0}, r"temperature: 3.0 is not in \[0, 2\]"),
                     ({"top_p": 0.0}, r"top_p: 0.0 is not in \(0, 1\]"),
                     ({"reasoning": "loud"}, "reasoning: 'loud' is not one of none, save, disable")):
        with pytest.raises(ValueError, match=why):
            JobConfig(out=tmp_path / "o.jsonl", servers=[ServerSpec("http://s")], inputs=[str(inp)], **bad).check()
        with pytest.raises(control.FormError, match=why):
            control.RunForm(out="o.jsonl", servers=("s",), inputs=(str(inp),), **bad).check(tmp_path)
