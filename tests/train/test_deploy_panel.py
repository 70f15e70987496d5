"""The deploy panel (ui/train/deploy.py) through AppTest: the preflight shown before starting, the
baseline's load as the default, Start through the supervisor to the result row beside the baseline and
the previous draft, and a failure shown with its step and how the server was left."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.supervisor.adhoc import save_job
from backend.flows.deploy import DeployRequest, DeployState, Row, write_state
from backend.flows.deploy_job import deploy_process_spec
from tests.bench.sweep_kit import SERVER
from tests.train.test_deploy_flow import BASELINE_TOK_S, hand_rows, make_ckpt, make_ws

SCRIPT = """
from ui.context import runtime
from ui.train.deploy import deploy_panel
deploy_panel(runtime(), {run!r}, {ckpt!r})
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    w = make_ws(tmp_path)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(w["root"]))
    yield w
    for rt in set(runtime_mod._runtimes.values()):
        for v in rt.supervisor.views():
            if v.live:
                rt.supervisor.stop(v.name, actor="test", source="test", wait=True)
    runtime_mod.close_all()


def _app(run: str | None, ckpt: Path | None) -> AppTest:
    at = AppTest.from_string(SCRIPT.format(run=run, ckpt=str(ckpt) if ckpt else None), default_timeout=30)
    return at.run()


def _texts(at) -> str:
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption])


def _button(at, key: str):
    return next(b for b in at.button if b.key == key)


def test_the_preflight_and_the_baselines_load_show_before_anything_starts(ws):
    base_id, _ = hand_rows(ws)
    good = make_ckpt(ws["runs"] / "tiny-run")
    at = _app("tiny-run", good)
    assert not at.exception
    text = _texts(at)
    assert f"against `{ws['target']}`: :green[no errors]" in text
    assert f"Measures at the baseline's load (result #{base_id}): concurrency 2, 6 prompts of 32/24 tokens." in text
    # the speculative values default to the server's (3 steps, top-k 1, 4 draft tokens)
    assert [n.value for n in at.number_input][:3] == [3, 1, 4]
    assert "train deploy" in text and f"--server {SERVER}" in text
    assert not _button(at, "train-deploy-start").disabled

    wrong = make_ckpt(ws["runs"] / "other", fc_in=96)
    at = _app("other", wrong)
    assert any("fc-width" in e.value and "takes 96 inputs" in e.value for e in at.error)
    assert ":red[2 error(s): the server will not be touched]" in _texts(at)
    assert _button(at, "train-deploy-start").disabled


def test_without_a_baseline_it_says_so_and_offers_to_measure_it(ws):
    at = _app("tiny-run", make_ckpt(ws["runs"] / "tiny-run"))
    assert any(f"No baseline of {SERVER} is stored" in w.value for w in at.warning)
    assert [c.value for c in at.checkbox] == [True]  # measure the baseline first: on by default
    assert [r.value for r in at.radio if r.key.startswith("train-deploy-load")] == ["given"]


def test_no_checkpoint_chosen_says_what_to_do(ws):
    at = _app(None, None)
    assert any("No checkpoint chosen" in i.value for i in at.info)


@pytest.mark.timeout(300)
def test_start_runs_the_job_and_shows_the_result_row_beside_the_baseline(ws):
    base_id, prev_id = hand_rows(ws)
    ckpt = make_ckpt(ws["runs"] / "tiny-run")
    at = _app("tiny-run", ckpt)
    at.radio(key="train-deploy-mode").set_value("builtin")
    at = at.run()
    _button(at, "train-deploy-start").click()
    at = at.run()
    _button(at, "train-deploy-confirm-yes").click()
    at = at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    rt = runtime_mod.get_runtime()
    [job] = [j for j in rt.jobs() if j.meta.get("kind") == "deploy"]
    assert job.meta["checkpoint"] == str(ckpt) and job.meta["server"] == SERVER
    deadline = time.time() + 240
    while time.time() < deadline:
        rt.supervisor.poll()
        v = rt.supervisor.view(job.name)
        if v is not None and v.state.value == "EXITED":
            break
        time.sleep(0.2)
    assert v.state.value == "EXITED" and v.exit_code == 0, Path(v.log_path).read_text()[-3000:]
    at = at.run()
    text = _texts(at)
    assert "checkpoint tiny-run/epoch_1_step_40 (epoch 1, step 40)" in text
    assert text.count(":green[✔ done]") == 6 and text.count(":grey[– skipped]") == 2
    [table] = at.dataframe
    df = table.value
    assert list(df[""]) == ["Baseline (no speculation)", f"Previous draft: {Path(ws['previous']).name}",
                            "This checkpoint: epoch_1_step_40"]
    assert list(df["result"])[:2] == [f"#{base_id}", f"#{prev_id}"]
    assert list(df["tok/s"])[:2] == ["90.0 tok/s", "82.3 tok/s"] and df["vs baseline"][1] == "0.91×"
    # the previous draft's break-even at this load: (2 × 2.1 / 82.3) / (2 / 90) = 2.30, as the seeds' story says
    assert df["break-even accept_len"][1] == "2.30"
    speed = next(m for m in at.metric if m.label == "Speedup vs baseline")
    tok = float(df["tok/s"][2].split()[0].replace(",", ""))
    assert speed.value == f"{tok / BASELINE_TOK_S:.2f}×"  # at the same load as the baseline
    out = next(m for m in at.metric if m.label == "Output tok/s")
    assert out.proto.delta == f"{tok - BASELINE_TOK_S:+.1f} tok/s vs baseline"  # the delta carries its unit
    assert any("Break-even is accept_len" in m.value for m in at.markdown)


def test_a_failed_deploy_shows_the_step_and_how_the_server_was_left(ws):
    rt = runtime_mod.get_runtime()
    ckpt = make_ckpt(ws["runs"] / "tiny-run")
    req = DeployRequest(str(ckpt), SERVER)
    spec, meta = deploy_process_spec(rt.workspace, req, "20260101-000000")
    save_job(rt.workspace.run_dir, spec, meta)  # as the dashboard saves a started job
    st = DeployState(request=req.to_dict(), label="checkpoint tiny-run/epoch_1_step_40 (epoch 1, step 40)")
    for name, status in (("inspect", "done"), ("preflight", "done"), ("load", "done"), ("baseline", "skipped"),
                         ("relaunch", "failed"), ("restore", "done")):
        st.step(name).status = status
        st.step(name).started_at = st.step(name).ended_at = time.time()
    st.state, st.failed_step = "failed", "relaunch"
    st.error = "spec did not become ready: EXITED (exit code 1)"
    st.restore, st.server_left = "restored: spec runs its previous configuration again", "previous"
    write_state(Path(meta["state"]), st)
    at = _app("tiny-run", ckpt)
    [err] = [e.value for e in at.error if "did not become ready" in e.value]
    assert err.startswith("**Relaunch the server with the checkpoint** failed: spec did not become ready")
    assert "**Server:** restored: spec runs its previous configuration again" in err
    assert "The server runs its previous configuration." in err
    assert _texts(at).count(":grey[○ not run]") == 2  # benchmark and compare never ran
    # a finished state with rows but no speedup says why, instead of a number
    st.state, st.failed_step, st.error = "done", None, None
    st.rows = [Row(concurrency=2, input_len=32, output_len=24, result_id=5, tok_s=150.0, accept_len=2.0,
                   reason="no baseline of spec is stored at concurrency 2 and 32/24 tokens").__dict__]
    write_state(Path(meta["state"]), st)
    at = _app("tiny-run", ckpt)
    assert next(m for m in at.metric if m.label == "Speedup vs baseline").value == "N/A"
    assert any("Speedup N/A: no baseline of spec is stored" in i.value for i in at.info)
