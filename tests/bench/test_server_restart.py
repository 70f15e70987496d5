"""A benchmark is never measured across two server runs: a managed server restarted (or stopped)
while ``bench run`` measured it gives a result stored marked invalid, with the reason; the job,
``bench list`` and the exit status say so; a run of one server start stays valid."""

from __future__ import annotations

import threading

import pytest

from backend.bench.client import Load
from backend.flows.bench_job import read_progress, run_job
from backend.flows.bench_runner import Mark, ServerRun, across_runs, target_of
from backend.flows.relaunch import relaunch_and_wait
from backend.cli.session import Session
from state.bench import BenchStore
from tests.bench.sweep_kit import SERVER, make_models, session, wait_until, write_workspace

LOAD = Load(concurrency=2, num_prompts=24, input_len=16, output_len=96)


@pytest.fixture
def ws(tmp_path):
    target, draft = make_models(tmp_path / "models")
    return write_workspace(tmp_path / "ws", target, draft, env={"SPECDECK_SIM_BASELINE_TOK_S": "300"})


def _measure_while(ws, tmp_path, action):
    """Start the server, benchmark it in a thread, and call ``action(other_session)`` once requests
    are being answered; returns (final progress, stored results, the progress file)."""
    progress = tmp_path / "job" / "progress.json"
    with session(ws) as s:
        relaunch_and_wait(s, SERVER, s.fleet.config(SERVER), actor="t", source="test", timeout_s=90)
        bench = BenchStore(s.store)
        out: dict = {}

        def job() -> None:
            out["final"], out["stored"] = run_job(target_of(s, SERVER), [LOAD], mode="builtin",
                                                  work_dir=tmp_path / "job", progress_path=progress,
                                                  store=lambda r: bench.insert(r).result)

        t = threading.Thread(target=job)
        t.start()
        try:
            wait_until(lambda: (p := read_progress(progress)) is not None and p.phase == "running" and p.done >= 2,
                       timeout=60, what="requests answered")
            if action is not None:
                other = Session(str(ws))
                try:
                    action(other)
                finally:
                    other.close()
        finally:
            t.join(120)
        assert not t.is_alive()
        return out["final"], out["stored"], progress, [bench.get(r.id) for r in out["stored"]]


@pytest.mark.timeout(240)
def test_a_restart_during_the_benchmark_marks_its_result_invalid(ws, tmp_path):
    def restart(other):
        before = other.sup.view(SERVER).run_id
        other.sup.restart(SERVER, actor="someone", source="test", wait=True)
        assert other.sup.view(SERVER).run_id != before

    final, stored, progress, from_store = _measure_while(ws, tmp_path, restart)
    (r,) = from_store
    assert r.invalid is not None, "a result measured across two server runs was stored as valid"
    # the requests sent while it was down fail at once, so the job may end before the new run is up: the
    # reason is then that it stopped (run still STOPPING or STARTING), else that it was restarted
    assert r.invalid.startswith(f"{SERVER} ") and "while it was measured" in r.invalid, r.invalid
    p = read_progress(progress)
    assert p.invalid == [{"id": r.id, "why": r.invalid}]
    assert final.invalid == p.invalid


@pytest.mark.timeout(240)
def test_a_benchmark_of_one_server_run_is_valid(ws, tmp_path):
    final, stored, progress, from_store = _measure_while(ws, tmp_path, None)
    (r,) = from_store
    assert r.invalid is None and r.results.completed == LOAD.num_prompts
    assert read_progress(progress).invalid == [] and final.state == "done"


def test_the_reasons_across_runs():
    a, b = ServerRun("r1", "RUNNING"), ServerRun("r2", "STARTING")
    assert across_runs("s", a, a) is None
    assert "s was restarted while it was measured (run r1 at the start, run r2, STARTING at the end)" \
        in across_runs("s", a, b)
    assert across_runs("s", a, ServerRun("r1", "EXITED")) == \
        "s stopped while it was measured (run r1 is EXITED at the end)"
    # no supervisor to ask: the server's own counters going back say it restarted
    m1 = Mark(at=0, info=None, gen_tokens=5000.0, verify_calls=2000.0, log_offset=None)
    m2 = Mark(at=1, info=None, gen_tokens=300.0, verify_calls=120.0, log_offset=None)
    assert "generated tokens counter went back from 5000 to 300" in across_runs("s", None, None, m1, m2)
    assert across_runs("s", None, None, m1, m1) is None


@pytest.mark.timeout(240)
def test_bench_list_and_the_cli_say_invalid(ws, tmp_path, capsys):
    """``bench run`` exits 1 naming the invalid result; ``bench list`` marks it."""
    from backend.cli import main

    with session(ws) as s:
        relaunch_and_wait(s, SERVER, s.fleet.config(SERVER), actor="t", source="test", timeout_s=90)
        progress = tmp_path / "cli" / "progress.json"

        def restart() -> None:  # from another thread: the command runs in this one (it sets signal handlers)
            wait_until(lambda: (p := read_progress(progress)) is not None and p.phase == "running" and p.done >= 2,
                       timeout=60, what="requests answered")
            other = Session(str(ws))
            try:
                other.sup.restart(SERVER, actor="someone", source="test", wait=True)
            finally:
                other.close()

        t = threading.Thread(target=restart)
        t.start()
        try:
            rc = {"rc": main(["--workspace", str(ws), "bench", "run", SERVER, "--builtin", "--concurrency", "2",
                              "--num-prompts", "24", "--input-len", "16", "--output-len", "96",
                              "--progress-file", str(progress)])}
        finally:
            t.join(120)
        err = capsys.readouterr().err
        assert rc["rc"] == 1
        assert "is invalid: spec " in err and "while it was measured" in err
        assert "1 of 1 result(s) of spec are invalid" in err
        assert main(["--workspace", str(ws), "bench", "list"]) == 0
        listed = capsys.readouterr().out
        assert "INVALID: spec " in listed and "while it was measured" in listed
