"""The Overview's pipeline stages (regenerate → train → deploy → benchmark: each stage's state, progress, figure
and the page it opens) and its training figures (the current run's step, loss and predicted accept length, the
same as the Training page's key figures, from the newest records only)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.flows.deploy import DONE, FAILED, RUNNING, DeployRequest, DeployState, write_state
from specdeck_types.eta import Eta
from tests.train.page_kit import gen2_log
from ui import fmt
from ui import overview_pipeline as pipe
from ui import overview_train as train
from ui.overview_data import RegenTile
from ui.train.data import follower, predicted
from ui.train.series import curves, latest_run


def _regen(state="running", asked=400, to_ask=1000, ended=False, eta=Eta(1800.0, 1500.0, 2400.0, "b"), failed=3):
    return RegenTile("mix-a", "/out/mix-a.jsonl", state, ended, asked, to_ask, asked - failed, failed,
                     None if ended else 0.5, None, None if ended else eta, time.time(), None)


def test_a_running_regeneration_is_green_with_its_progress_and_eta_band():
    s = pipe.regen_stage([_regen()], None)
    assert (s.tone, s.icon, s.word, s.state) == ("green", "●", "RUNNING 40%", "running")
    assert s.fraction == pytest.approx(0.4) and s.figure == "ETA 25-40 m"
    assert s.page == pipe.REGEN_PAGE and s.query == {"job": "mix-a"}
    assert "400 / 1,000 rows, 3 failed" in s.hover and "(point 30 m 00 s)" in s.hover
    html = pipe.stage_html(s)
    assert "● RUNNING 40%" in html and 'width:40%' in html and "ETA 25-40 m" in html


@pytest.mark.parametrize("state,tone,word", [("done", "gray", "DONE"), ("failed", "red", "FAILED"),
                                             ("exited 1", "red", "FAILED"), ("stopped", "gray", "STOPPED"),
                                             ("paused", "orange", "PAUSED 40%")])
def test_an_ended_or_paused_regeneration_says_so_without_a_bar(state, tone, word):
    ended = state != "paused"
    s = pipe.regen_stage([] if ended else [_regen(state)], _regen(state, ended=True) if ended else None)
    assert (s.tone, s.word) == (tone, word)
    if ended:
        assert s.fraction is None and "ETA" not in s.figure and s.figure == "400 / 1,000 rows · 3 failed"
        assert 'class="ov-stage-bar"' not in pipe.stage_html(s)


def test_stages_never_run_say_so_in_grey_with_the_next_step():
    for s in (pipe.regen_stage([], None), pipe.train_stage(None), pipe.bench_stage(None, pipe.NewestVerdict(0, None, None))):
        assert (s.tone, s.icon, s.word) == ("gray", "○", "NOT RUN"), s
        assert s.hover.endswith("page.") or "page" in s.hover


def _figs(**kw):
    base = dict(name="draft-a", badge=fmt.state_badge("RUNNING"), live=True, started=True, step=120, total_steps=200,
                loss=1.2345, loss_step=120, predicted=2.31, predicted_step=120, ended=None)
    base.update(kw)
    return train.TrainFigures(**base)


def test_a_training_run_running_done_failed_or_never_started():
    s = pipe.train_stage(_figs())
    assert (s.tone, s.word, s.figure) == ("green", "RUNNING 60%", "loss 1.234")
    assert s.fraction == pytest.approx(0.6) and s.query == {"run": "draft-a"} and s.page == pipe.TRAIN_PAGE
    done = pipe.train_stage(_figs(live=False, badge=fmt.state_badge("EXITED", 0), step=200, ended="exit code 0"))
    assert (done.tone, done.icon, done.word, done.figure) == ("gray", "✓", "DONE", "accept 2.31 (pred.)")
    failed = pipe.train_stage(_figs(live=False, badge=fmt.state_badge("EXITED", 1)))
    assert (failed.tone, failed.icon, failed.word) == ("red", "✕", "FAILED")
    never = pipe.train_stage(_figs(live=False, badge=fmt.state_badge("NEVER"), started=False, step=None, loss=None,
                                   predicted=None, why="no log yet: the run writes it when it starts"))
    assert (never.word, never.figure) == ("NOT RUN", "not started")


def _deploy_rt(tmp_path: Path, state: DeployState | None, live: bool | None):
    path = tmp_path / "deploy.json"
    if state is not None:
        write_state(path, state)
    job = SimpleNamespace(name="deploy-tiny-1", meta={"kind": "deploy", "state": str(path), "server": "tiny"})
    view = None if live is None else SimpleNamespace(live=live, state=SimpleNamespace(value="RUNNING" if live else "EXITED"),
                                                      exit_code=None if live else 1, detail="exit code 1")
    return SimpleNamespace(jobs=lambda: [job], supervisor=SimpleNamespace(view=lambda name: view))


def test_a_deploy_stage_follows_its_state_file(tmp_path):
    req = DeployRequest(checkpoint="/ck/epoch_0_step_50", server="tiny", run_name="draft-a").to_dict()
    st = DeployState(request=req, label="draft-a step 50")
    for s in st.steps[:4]:
        s.status = DONE
    st.step("relaunch").status = RUNNING
    stage = pipe.deploy_stage(_deploy_rt(tmp_path, st, True), ["draft-a"])
    assert (stage.tone, stage.word, stage.figure) == ("green", "RUNNING 50%", "relaunch")
    assert stage.query == {"run": "draft-a", "tab": "Deploy"} and stage.page == pipe.TRAIN_PAGE
    # the process ended while the file still says running: failed, said so
    gone = pipe.deploy_stage(_deploy_rt(tmp_path, st, False), ["draft-a"])
    assert (gone.tone, gone.word) == ("red", "FAILED") and "without writing a final state" in gone.hover
    st.state, st.failed_step, st.error = FAILED, "preflight", "fc width differs"
    failed = pipe.deploy_stage(_deploy_rt(tmp_path, st, False), ["other-run"])
    assert (failed.word, failed.figure) == ("FAILED", "at preflight") and failed.query == {"tab": "Deploy"}
    st.state = DONE
    assert pipe.deploy_stage(_deploy_rt(tmp_path, st, False), ["draft-a"]).word == "DONE"
    none = pipe.deploy_stage(SimpleNamespace(jobs=lambda: [], supervisor=None), [])
    assert (none.word, none.figure) == ("NOT RUN", "no deploy yet")


def test_a_benchmark_stage_running_or_with_its_newest_verdict():
    prog = SimpleNamespace(server="tiny", done=50, total=200, fraction=0.25, phase="measuring", step=0, loads=[{}])
    s = pipe.bench_stage((SimpleNamespace(name="bench-1"), prog), pipe.NewestVerdict(3, None, None))
    assert (s.tone, s.word, s.figure, s.query) == ("green", "RUNNING 25%", "tiny · 50/200 req", {"tab": "Run a benchmark"})
    r = SimpleNamespace(id=7, server="glm5", config=SimpleNamespace(), load=SimpleNamespace(concurrency=1))
    v = SimpleNamespace(level="bad", word="does not pay", ratio=0.56)
    from ui.bench import data as bench_data

    orig = (bench_data.server_of, bench_data.load_short)
    bench_data.server_of, bench_data.load_short = (lambda r_: "glm5"), (lambda r_: "c1")
    try:
        done = pipe.bench_stage(None, pipe.NewestVerdict(4, r, v))
    finally:
        bench_data.server_of, bench_data.load_short = orig
    assert (done.word, done.figure, done.figure_tone) == ("DONE", "0.56× does not pay", "red")
    assert f'color:{pipe.TONE_TEXT["red"]}' in pipe.stage_html(done)
    only_base = pipe.bench_stage(None, pipe.NewestVerdict(2, None, None))
    assert only_base.figure == "2 results, all without speculation"


# -- training figures ------------------------------------------------------------------------------------------


def _train_rt(log: Path, out: Path, live: bool = True):
    view = SimpleNamespace(live=live, state=SimpleNamespace(value="RUNNING" if live else "EXITED"), exit_code=0,
                           detail="exit code 0")
    return SimpleNamespace(train=SimpleNamespace(names=lambda: ["draft-a"], log_path=lambda n: log,
                                                 output_dir=lambda n: out),
                           supervisor=SimpleNamespace(view=lambda n: view))


def test_training_figures_are_the_training_pages_key_figures(tmp_path):
    log = tmp_path / "draft-a.log"
    log.write_text(gen2_log(steps=20, total_steps=40))
    rt = _train_rt(log, tmp_path / "out")
    f = train.train_figures(rt, "draft-a")
    # the Training page's own computation over the whole log, at its default options (greedy, 3 draft steps)
    snap = follower(log, tmp_path / "out").poll()
    records, times = latest_run(snap.records, snap.times)
    page_loss = curves(records, times).train["loss"].last()
    page_pred = predicted(records, snap.generation, temperature=0.0, num_steps=3).latest.accept_length
    assert (f.step, f.total_steps) == (20, 40) and f.fraction == pytest.approx(0.5)
    assert f.loss == pytest.approx(page_loss) == pytest.approx(3.0)
    assert f.predicted == pytest.approx(page_pred) == pytest.approx(2.30) and f.predicted_step == 20
    assert train.figures_text(f) == ("step 20 / 40 · loss 3.000", "predicted accept length 2.30")
    assert train.focus_run(rt) == "draft-a"


def test_training_figures_read_only_the_newest_records_of_the_newest_run(tmp_path):
    """A long log: the figures come from its tail; a run appended after it shows its own figures only."""
    log = tmp_path / "long.log"
    log.write_text(gen2_log(steps=20, total_steps=40) * 40)  # far more records than the tail looked at
    rt = _train_rt(log, tmp_path / "out")
    assert len(follower(log, tmp_path / "out").poll().records) > train.TAIL_RECORDS
    f = train.train_figures(rt, "draft-a")
    assert f.loss == pytest.approx(3.0) and f.predicted == pytest.approx(2.30)
    # a new run appended: its first steps have a loss but no acc line yet
    with log.open("a") as fh:
        fh.write("\n===== specdeck: draft-a run r2 starting at 2026-12-02 00:00:00: python -m x\n")
        fh.write(gen2_log(steps=3, total_steps=40))
    f = train.train_figures(rt, "draft-a")
    assert f.step == 3 and f.loss == pytest.approx(4.7)
    assert f.predicted is None and "acc_0" in f.why  # not the previous run's prediction
    assert train.figures_text(f)[1] == "predicted accept length N/A"


def test_a_run_without_a_log_has_no_figures_and_says_why(tmp_path):
    rt = _train_rt(tmp_path / "missing.log", tmp_path / "out", live=False)
    f = train.train_figures(rt, "draft-a")
    assert not f.started and f.step is None and f.loss is None and f.predicted is None
    assert f.why.startswith("no log yet")
