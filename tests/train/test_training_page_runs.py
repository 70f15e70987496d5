"""AppTest of the Training page's runs: start, stop and resume through the supervisor (SpecForge 0.2.0's
resume confirmed first), a failed run's reason, the form that creates or edits a run with its generation
and command, and the generation detected again."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.helpers import shown_text
from tests.train.page_kit import (REPO, metric, open_box, open_tab, page, run_state, runtime_of, train_ws,  # noqa: F401
                                  workspace)


@pytest.mark.timeout(180)
def test_start_stop_and_resume_with_the_020_warning(train_ws):
    from state import audit
    from tests.supervisor.conftest import wait_for

    at = open_tab(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=120)), "Run")
    assert at.selectbox(key="train-run").value == "sf"
    assert any("**SpecForge generation:** Gen-2 (detected, SpecForge 0.2.0)" == m.value for m in at.markdown)
    # the command shown as text; as a code block to copy only once its expander is open (no highlighter before)
    assert any("scripts/train_eagle3.py --target-model-path /models/target" in t for t in shown_text(at))
    assert not at.code
    at.session_state["train-cmd-copy"] = True  # what opening it does (the page runs again)
    at.run()
    assert any("scripts/train_eagle3.py --target-model-path /models/target" in c.value for c in at.code)
    assert any("NOT STARTED" in m.value for m in at.markdown)
    at.button(key="train-start").click().run()
    log = train_ws / "logs" / "sf.log"
    wait_for(lambda: run_state(train_ws) == "RUNNING" and log.exists() and "epoch_0_step_4" in log.read_text(),
             timeout_s=60)
    open_tab(at, "Curves")
    assert any("RUNNING" in m.value and "**sf**" in m.value for m in at.markdown)
    assert int(metric(at, "step").value.replace(",", "")) >= 4  # the curves follow the run's own log
    assert at.button(key="train-start").disabled and at.button(key="train-resume").disabled

    at.button(key="train-stop").click().run()
    assert any("Stop **sf**?" in w.value for w in at.warning)
    assert run_state(train_ws) == "RUNNING"  # nothing stopped before the confirmation
    at.button(key="train-confirm-stop-yes").click().run()
    wait_for(lambda: run_state(train_ws) == "EXITED", timeout_s=30)
    assert "got SIGTERM, leaving" in log.read_text()

    at.run()
    at.button(key="train-resume").click().run()
    warning = next(w.value for w in at.warning if w.value.startswith("**Resume sf?**"))
    assert "SpecForge 0.2.0's --resume silently starts over" in warning
    at.run()
    assert run_state(train_ws) == "EXITED"  # not resumed until confirmed
    at.button(key="train-confirm-resume-yes").click().run()
    assert not at.error, [e.value for e in at.error]  # refused or failed: said on the page
    assert any(t.value == "Resume: requested" for t in at.toast), [t.value for t in at.toast]
    try:
        wait_for(lambda: "resume=True" in log.read_text(), timeout_s=60)
    except AssertionError:
        v = runtime_of(train_ws).supervisor.view("sf")
        raise AssertionError(f"no resume=True in the log; the run is {v.state.value} ({v.detail}, exit "
                             f"{v.exit_code}); the log ends {log.read_text()[-600:]!r}") from None
    assert runtime_of(train_ws).supervisor.view("sf").spec.argv[-1] == "--resume"
    at.run()
    at.button(key="train-stop").click().run()
    at.button(key="train-confirm-stop-yes").click().run()
    wait_for(lambda: run_state(train_ws) == "EXITED", timeout_s=30)
    rows = [(r.action, r.outcome, r.source) for r in audit.recent(runtime_of(train_ws).store, limit=50)
            if r.target == "sf"][::-1]
    assert rows == [("start", "ok", "dashboard"), ("stop", "ok", "dashboard"), ("resume-confirmed", "ok", "dashboard"),
                    ("start", "ok", "dashboard"), ("stop", "ok", "dashboard")]


@pytest.mark.timeout(180)
def test_resume_cancelled_starts_nothing(train_ws):
    from tests.train.ckpt_files import write_checkpoint

    at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=120))
    resume = at.button(key="train-resume")
    assert resume.disabled and "nothing to resume from" in resume.help  # a run never started has no checkpoint
    write_checkpoint(train_ws / "outputs" / "train" / "sf" / "epoch_0_step_2")
    at.run()
    at.button(key="train-resume").click().run()
    warning = next(w.value for w in at.warning if w.value.startswith("**Resume sf?**"))
    assert "SpecForge 0.2.0's --resume silently starts over" in warning  # said before the choice
    at.button(key="train-confirm-resume-no").click().run()
    assert not any(w.value.startswith("**Resume sf?**") for w in at.warning)
    assert run_state(train_ws) == "NEVER"


FORM = "train-form-new"


def _fill(at: AppTest, **fields) -> AppTest:
    open_box(at, "train-new-open")
    for key, value in fields.items():
        w = at.get("text_input") + at.get("selectbox") + at.get("number_input")
        widget = next(x for x in w if x.key == f"{FORM}-{key}")
        (widget.input(value) if hasattr(widget, "input") and isinstance(value, str) and widget.type == "text_input"
         else widget.set_value(value))
    next(b for b in at.button if b.label == "Review").click()
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.timeout(120)
def test_form_creates_a_run_with_its_command(workspace):
    regen = workspace / "outputs" / "regen"
    regen.mkdir(parents=True)
    (regen / "chat.progress.jsonl").write_text("")
    at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=120))
    data = at.selectbox(key=f"{FORM}-data-pick")
    assert str(regen / "chat.jsonl") in data.options  # the workspace's regeneration output is offered,
    assert data.value == str(regen / "chat.jsonl")  # and chosen until another is
    _fill(at, **{"name": "mini", "target-typed": "/models/t", "data-pick": str(regen / "chat.jsonl"),
                 "gen": "gen2", "entry": "module:backend.flows.tiny train", "epochs": 2, "lr": 3e-3,
                 "ttt": 4, "tracker": "tensorboard"})
    assert "**SpecForge generation:** Gen-2 (chosen)" in [m.value for m in at.markdown]
    cmd = next(c.value for c in at.code if "backend.flows.tiny" in c.value)
    assert (f"-m backend.flows.tiny train --target-model-path /models/t --train-data-path {regen / 'chat.jsonl'} "
            f"--output-dir {workspace / 'outputs/train/mini'} --num-epochs 2 --batch-size 1 --learning-rate 0.003 "
            "--max-length 2048 --ttt-length 4 --report-to tensorboard") in cmd
    assert "name = \"mini\"" not in (workspace / "specdeck.toml").read_text()  # nothing written before Save
    at.button(key=f"{FORM}-save").click().run()
    text = (workspace / "specdeck.toml").read_text()
    assert '[[train]]\nname = "mini"\ngeneration = "gen2"\nentry = "module:backend.flows.tiny train"\n' in text
    assert "num_epochs = 2\n" in text and "ttt_length = 4\n" in text and 'report_to = "tensorboard"' in text
    assert "batch_size" not in text  # SpecForge's default is not written out
    assert at.selectbox(key="train-run").value == "mini"
    assert any("NOT STARTED" in m.value and "**mini**" in m.value for m in at.markdown)
    # the new-run form starts empty again: its kept fields do not offer "mini" a second time
    assert f"{FORM}-name" not in at.session_state or at.session_state[f"{FORM}-name"] == ""
    assert f"{FORM}-epochs" not in at.session_state or at.session_state[f"{FORM}-epochs"] != 2


@pytest.mark.timeout(120)
def test_form_shows_the_gen3_yaml(workspace):
    at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=120))
    _fill(at, **{"name": "g3", "target-typed": "/models/t", "data-typed": "data.jsonl", "gen": "gen3",
                 "capture": "http://127.0.0.1:30000", "ttt": 5})
    assert any(m.value.startswith("**Gen-3 config** (written to") for m in at.markdown)
    yaml_text = next(c.value for c in at.code if c.value.startswith("model:"))
    assert "  ttt_length: 5\n" in yaml_text and "run_id: g3\n" in yaml_text
    assert "    server_urls:\n    - http://127.0.0.1:30000" in yaml_text
    assert any(" train --config " in c.value for c in at.code)


@pytest.mark.timeout(120)
def test_form_errors_name_the_field(workspace):
    at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=120))
    _fill(at, **{"name": "bad name", "target-typed": "/models/t", "data-typed": "d.jsonl"})
    err = next(e.value for e in at.error if e.value.startswith("**Not saved**"))
    assert "`name`: use letters, digits" in err
    _fill(at, **{"name": "ok", "gpus": "0,1,2", "tp": 2})
    err = next(e.value for e in at.error if e.value.startswith("**Not saved**"))
    assert "`config`: tp_size 2 must divide the number of GPUs (3)" in err
    _fill(at, **{"name": "ok", "gpus": "0,x", "tp": 1})
    err = next(e.value for e in at.error if e.value.startswith("**Not saved**"))
    assert "`gpus`: '0,x' is not a list of GPU indices like 0,1,2,3" in err
    assert "[[train]]" not in (workspace / "specdeck.toml").read_text()


@pytest.mark.timeout(120)
def test_a_failed_run_says_why_and_shows_its_log(tmp_path, monkeypatch):
    from tests.supervisor.conftest import wait_for

    py = tmp_path / "env" / "python"
    py.parent.mkdir()
    py.write_text("#!/bin/sh\necho 'Training Epoch 0:   0%|  | 0/10 [00:00<?, ?it/s]'\n"
                  "echo '2026-11-30 12:47:28,478 - ERROR - /data/train.jsonl: training data file not found' >&2\n"
                  "exit 1\n")
    py.chmod(0o755)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(f'[workspace]\nname = "fail"\n\n[[train]]\nname = "bad"\npython = "{py}"\n'
                                      'generation = "gen2"\nentry = "module:trainer train"\n'
                                      'target_model = "/models/t"\ntrain_data = "/data/train.jsonl"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(ws))
    try:
        at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=120))
        at.button(key="train-start").click().run()
        wait_for(lambda: (runtime_of(ws).supervisor.view("bad").state.value == "EXITED"), timeout_s=30)
        open_tab(at, "Run")
        err = next(e.value for e in at.error if e.value.startswith("The run ended with exit code 1"))
        assert "ERROR - /data/train.jsonl: training data file not found" in err
        assert f"`{ws / 'logs' / 'bad.log'}`" in err
        tail = "\n".join(shown_text(at))
        assert "Training Epoch 0:   0%|  | 0/10 [00:00<?, ?it/s]" in tail and "training data file not found" in tail
        # a training log holds none of the dashboard's /health requests: no toggle about them
        assert not [t for t in at.toggle if "/health" in t.label]
        assert any("newest line written" in c.value for c in at.caption)
    finally:
        runtime_mod.close_all()


# a workspace with one training run, d1, a comment above it and a hand-kept line in it
D1 = ('[workspace]\nname = "edit"\n\n# the draft we serve\n[[train]]\nname = "d1"\ngeneration = "gen2"\n'
      'entry = "module:backend.flows.tiny train"\ntarget_model = "/models/t"\ntrain_data = "data.jsonl"\n'
      'learning_rate = 1e-4\nextra_args = ["--size", "tiny"]  # kept by hand\n')


@pytest.mark.timeout(120)
def test_the_curves_checkpoints_and_deploy_tabs_are_built_only_while_open_and_keep_their_fields(workspace):
    (workspace / "specdeck.toml").write_text(D1, encoding="utf-8")
    at = open_tab(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=120)), "Curves")
    at.toggle(key="train-log-y").set_value(True).run()
    open_tab(at, "Run")
    assert "train-log-y" not in [t.key for t in at.toggle]  # the curves are not built behind the Run tab
    k = "train-form-d1"
    # the edit form is built only while its expander is open, and the new-run form only while its is
    assert f"{k}-lr" not in [n.key for n in at.number_input] and "train-form-new-lr" not in [
        n.key for n in at.number_input]
    open_box(at, "train-edit-open")
    assert at.number_input(key=f"{k}-lr").value == pytest.approx(1e-4)
    open_tab(at, "Curves")
    assert at.toggle(key="train-log-y").value is True  # kept while its tab was not built
    # the Run tab's form is drawn behind every tab, so what a browser holds typed in it and not yet reviewed
    # stays there (a form's fields reach the page only on Review)
    assert f"{k}-lr" in [n.key for n in at.number_input]
    open_tab(at, "Deploy")
    assert "train-log-y" not in [t.key for t in at.toggle] and f"{k}-lr" in [n.key for n in at.number_input]


def test_form_edits_a_run_and_keeps_the_rest(workspace):
    (workspace / "specdeck.toml").write_text(D1, encoding="utf-8")
    at = open_tab(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=120)), "Run")
    assert at.selectbox(key="train-run").value == "d1"
    k = "train-form-d1"
    open_box(at, "train-edit-open")
    assert at.text_input(key=f"{k}-name").disabled and at.text_input(key=f"{k}-name").value == "d1"
    assert at.number_input(key=f"{k}-lr").value == pytest.approx(1e-4)
    at.number_input(key=f"{k}-lr").set_value(5e-4)
    next(b for b in at.button if b.label == "Review" and b.proto.form_id == k).click()
    at.run()
    assert any("--learning-rate 0.0005" in c.value for c in at.code)
    at.button(key=f"{k}-save").click().run()
    text = (workspace / "specdeck.toml").read_text()
    assert "learning_rate = 0.0005" in text and "learning_rate = 1e-4" not in text
    assert '# the draft we serve\n[[train]]\nname = "d1"' in text
    assert 'extra_args = ["--size", "tiny"]  # kept by hand' in text


@pytest.mark.timeout(180)
def test_generation_detected_again_after_an_install(tmp_path, monkeypatch):
    from backend.train.generation import clear_cache
    from tests.train.test_generation import make_venv

    clear_cache()
    venv = tmp_path / "venv"
    py = make_venv(venv)  # no SpecForge yet
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(f'[workspace]\nname = "g"\n\n[[train]]\nname = "g"\npython = "{py}"\n'
                                      'target_model = "/models/t"\ntrain_data = "data.jsonl"\n'
                                      'capture_servers = ["http://127.0.0.1:30000"]\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(ws))
    try:
        at = open_tab(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=120)), "Run")
        assert any("`generation`: the SpecForge generation is not known" in e.value and
                   "no specforge package installed" in e.value for e in at.error)
        # SpecForge 0.2.0's wheel installed into the environment (package, metadata, console script)
        import shutil
        shutil.rmtree(venv)
        make_venv(venv, version="0.2.0", cli=True, console_script=True)
        at.run()
        assert any("no specforge package installed" in e.value for e in at.error)  # the answer kept so far
        at.button(key="train-redetect").click().run()
        assert "**SpecForge generation:** Gen-3 (detected, SpecForge 0.2.0)" in [m.value for m in at.markdown]
    finally:
        runtime_mod.close_all()
        clear_cache()
