"""AppTest of the Training page: curves from a Gen-2 log written here, the controls, the predicted accept
length, the checkpoint table from folders written by tests/train/ckpt_files.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.train.ckpt_files import eagle3_tensors, write_checkpoint, write_target

REPO = Path(__file__).resolve().parents[2]

# Per TTT position acceptance printed at step 20 (the last interval line): 1 + .8 + .8·.5 + .8·.5·.25 = 2.30
ACC_AT_20 = (0.80, 0.50, 0.25)


def _bar(epoch: int, n: int, total: int, loss: float, acc: float) -> str:
    pct = int(100 * n / total)
    return (f"\rTraining Epoch {epoch}: {pct:3d}%|#         | {n}/{total} [00:{n:02d}<00:{total - n:02d},  1.00s/it, "
            f"loss={loss:.2f}, acc={acc:.2f}, acceptance_rate={acc - 0.05:.2f}, time=1.00s, grad_norm=0.50]")


def gen2_log(steps: int = 20, total_steps: int = 40) -> str:
    """One epoch of a Gen-2 run as the supervisor captures it: loss 5.00 falling 0.10 a step, acc rising 0.02,
    interval lines every 10 steps for 3 positions."""
    out = [" -----------【args】-----------\n", " num_epochs ··············· 2\n",
           f"Auto-calculated total_steps: {total_steps} (num_epochs=2 * steps_per_epoch={total_steps // 2})\n",
           "Starting training from epoch:0          step:0\n",
           f"Training Epoch 0:   0%|          | 0/{total_steps // 2} [00:00<?, ?it/s]"]
    for n in range(1, steps + 1):
        out.append(_bar(0, n, total_steps // 2, 5.0 - 0.1 * n, 0.1 + 0.02 * n))
        if n % 10 == 0:
            acc = ACC_AT_20 if n == 20 else (0.60, 0.30, 0.10)
            out.append("\n" + "".join(f"Eval - Step {n} [{n + 1}/2], position {i},  Acc: {a:.2f}\n"
                                      for i, a in enumerate(acc)))
    return "".join(out)


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "train-apptest"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    rt = runtime_mod._runtimes.get(tmp_path.resolve())
    if rt is not None:
        for v in rt.supervisor.views():
            if v.live:
                rt.supervisor.stop(v.name, actor="test", source="test", wait=True)
    runtime_mod.close_all()


def _page(at: AppTest) -> AppTest:
    at.run()
    at.switch_page("pages/training.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _follow(at: AppTest, log: Path | None, out: Path | None = None) -> AppTest:
    if log is not None:
        at.text_input(key="train-follow-log").input(str(log))
    if out is not None:
        at.text_input(key="train-follow-out").input(str(out))
    next(b for b in at.button if b.label == "Follow").click()
    at.run()
    assert not at.exception, at.exception
    return at


def _metric(at: AppTest, label: str):
    return next(m for m in at.metric if m.label == label)


def _chart_titles(at: AppTest) -> list[str]:
    import json
    return [json.loads(c.proto.spec)["layout"].get("title", {}).get("text") for c in at.get("plotly_chart")]


def _figure(at: AppTest, title: str) -> dict:
    import json
    for c in at.get("plotly_chart"):
        fig = json.loads(c.proto.spec)
        if fig["layout"].get("title", {}).get("text") == title:
            return fig
    raise AssertionError(f"no chart titled {title!r}: {_chart_titles(at)}")


def _trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t.get("name") == name)


@pytest.mark.timeout(120)
def test_curves_from_a_gen2_log(workspace):
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    assert any(t.value == "Training" for t in at.title)
    assert at.selectbox(key="train-run").value == "train.log"
    assert [p.proto.text for p in at.get("progress")] == ["**20 of 40 steps** (50%) · epoch 1 of 2"]
    assert _metric(at, "step").value == "20"
    assert _metric(at, "ETA").value == "20 s"  # 20 steps left at 1.00 s/it
    assert _metric(at, "loss").value == "3.000"  # 5.00 - 20 × 0.10
    assert _metric(at, "predicted accept length").value == "2.30"
    assert _metric(at, "measured accept_len").value == "N/A"
    stated = next(c.value for c in at.caption if c.value.startswith("**Predicted accept length**"))
    assert "1 + a0 + a0·a1 + a0·a1·a2 + …" in stated and "= **2.30**" in stated
    assert "a0 = 0.80 · a1 = 0.50 · a2 = 0.25" in stated and "not a measurement" in stated
    titles = _chart_titles(at)
    for t in ("Loss", "Accept length: predicted and measured", "acc_i per TTT position", "Step time"):
        assert t in titles
    at.slider(key="train-smooth").set_value(0.0).run()  # the values as logged
    pos = _figure(at, "acc_i per TTT position")
    assert {t["name"] for t in pos["data"] if t.get("name")} == {"pos 0", "pos 1", "pos 2"}
    assert [_trace(pos, f"pos {i}")["y"] for i in range(3)] == [[0.60, 0.80], [0.30, 0.50], [0.10, 0.25]]
    accept = _figure(at, "Accept length: predicted and measured")
    # steps 10 and 20: 1 + .6 + .6·.3 + .6·.3·.1 = 1.798, then 2.30
    assert _trace(accept, "predicted (1 + a0 + a0·a1 + …)")["y"] == pytest.approx([1.798, 2.30])
    assert any("acceptance_rate_i per TTT position**: N/A" in c.value for c in at.caption)
    assert any("**Learning rate**: N/A" in c.value for c in at.caption)


@pytest.mark.timeout(120)
def test_smoothing_and_x_axis(workspace):
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    at.slider(key="train-smooth").set_value(0.0).run()
    loss = _trace(_figure(at, "Loss"), "loss")
    assert loss["x"] == list(range(1, 21))
    assert loss["y"] == pytest.approx([5.0 - 0.1 * n for n in range(1, 21)])
    assert _figure(at, "Loss")["layout"]["xaxis"]["title"]["text"] == "step"
    at.slider(key="train-smooth").set_value(0.5).run()
    fig = _figure(at, "Loss")
    smoothed = _trace(fig, "loss")
    # EMA with weight 0.5 and the start-up correction: 4.90, (0.5·4.90 + 4.80)/1.5 = 4.8333, …
    assert smoothed["y"][:2] == pytest.approx([4.90, 4.8333], abs=1e-4)
    raw = [t for t in fig["data"] if t.get("showlegend") is False]
    assert raw and raw[0]["y"] == pytest.approx([5.0 - 0.1 * n for n in range(1, 21)])  # raw kept, faint
    at.segmented_control(key="train-x").set_value("wall time").run()
    fig = _figure(at, "Loss")
    assert fig["layout"]["xaxis"]["type"] == "date"
    assert isinstance(_trace(fig, "loss")["x"][0], str)  # local date-times, one a second apart (1.00s/it)
    xs = _trace(fig, "loss")["x"]
    from datetime import datetime
    assert (datetime.fromisoformat(xs[-1]) - datetime.fromisoformat(xs[0])).total_seconds() == pytest.approx(19)


@pytest.mark.timeout(120)
def test_draft_steps_cap_the_prediction(workspace):
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    at.number_input(key="train-num-steps").set_value(2).run()
    assert _metric(at, "predicted accept length").value == "2.20"  # 1 + .8 + .8·.5


@pytest.mark.timeout(120)
def test_sampling_without_acceptance_rate_says_so(workspace):
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    at.segmented_control(key="train-serving").set_value("sampling").run()
    stated = next(c.value for c in at.caption if c.value.startswith("**Predicted accept length**"))
    assert "Gen-2 logs no acceptance_rate_i; acc_i (greedy acceptance) is used instead" in stated


@pytest.mark.timeout(120)
def test_missing_log_and_unreadable_lines(workspace):
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), workspace / "later.log")
    assert any("No log yet at" in i.value for i in at.info)
    log = workspace / "later.log"
    log.write_text(gen2_log(steps=3) + "\nEval - Step x [1/2], position 0,  Acc: 0.5\n", encoding="utf-8")
    at.run()
    assert _metric(at, "step").value == "3"
    assert any("1 not readable" in c.value for c in at.caption)
    assert any(e.label.startswith("Lines not read (1") for e in at.expander)


def _ckpt_table(at: AppTest):
    return next(d.value for d in at.dataframe if "servable" in d.value.columns)


def _runtime(workspace: Path):
    return runtime_mod._runtimes[workspace.resolve()]


@pytest.mark.timeout(120)
def test_checkpoint_table_and_inspection(workspace):
    out = workspace / "out"
    write_checkpoint(out / "epoch_0_step_10", state=(0, 10))
    write_checkpoint(out / "epoch_0_step_20", state=(0, 20))
    write_checkpoint(out / "epoch_1_step_30", tensors=eagle3_tensors(d2t=False))
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log, out)
    table = _ckpt_table(at)
    assert list(table["checkpoint"]) == ["epoch_1_step_30", "epoch_0_step_20", "epoch_0_step_10"]
    assert list(table["marks"]) == ["latest", "", ""]
    assert list(table["step"]) == ["30", "20", "10"] and list(table["epoch"]) == ["1", "0", "0"]
    assert list(table["servable"]) == ["yes", "yes", "yes"]
    assert any("best: N/A" in c.value for c in at.caption)
    # the latest is inspected first: no d2t in its weights, no training state
    assert at.selectbox(key="train-ckpt-train.log-pick").value == "epoch_1_step_30"
    assert _metric(at, "fc.weight").value == "8 × 24"
    assert _metric(at, "d2t / t2d").value == "✕ / ✓"
    assert _metric(at, "layers").value == "1"
    assert _metric(at, "vocab (target / draft)").value == "32 / 16"
    assert _metric(at, "epoch / step").value == "N/A / N/A"
    assert any("no d2t tensor" in w.value for w in at.warning)
    at.selectbox(key="train-ckpt-train.log-pick").set_value("epoch_0_step_20").run()
    assert _metric(at, "epoch / step").value == "0 / 20"
    assert _metric(at, "d2t / t2d").value == "✓ / ✓"
    assert any(e.label == "training_state.pt args (4)" for e in at.expander)


@pytest.mark.timeout(120)
def test_gen3_runtime_checkpoint_offers_the_export(workspace):
    import os

    out = workspace / "out"
    for step in (100, 200):
        d = out / f"llama-step{step}"
        d.mkdir(parents=True)
        (d / "training_state_rank0.pt").write_bytes(b"")
    os.symlink("llama-step100", out / "llama-latest")
    os.symlink("llama-step200", out / "llama-best")
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    at.text_input(key="train-follow-runid").input("llama")
    _follow(at, None, out)
    table = _ckpt_table(at)
    assert list(table["checkpoint"]) == ["llama-step200", "llama-step100"]
    assert list(table["marks"]) == ["best", "latest"]
    assert list(table["servable"]) == ["export first", "export first"]
    assert list(table["epoch"]) == ["N/A", "N/A"] and list(table["step"]) == ["200", "100"]
    assert any(e.value.startswith("**Not servable**: `llama-step100` is a SpecForge runtime checkpoint")
               for e in at.error)
    assert any("--draft-config <the run's draft config>" in c.value for c in at.code)
    at.text_input(key="train-ckpt-draftcfg-out").input("configs/llama3-8B-eagle3.json").run()
    cmd = f"specforge export --to sglang --checkpoint {out / 'llama-step100'} --draft-config " \
          f"configs/llama3-8B-eagle3.json --output-dir {out / 'llama-step100-sglang'}"
    assert cmd in [c.value for c in at.code]


@pytest.mark.timeout(120)
def test_preflight_against_a_folder(workspace):
    out = workspace / "out"
    write_checkpoint(out / "epoch_0_step_10")
    write_checkpoint(out / "epoch_0_step_20", tensors=eagle3_tensors(fc_in=48))  # 3 × 16: another target's
    target = write_target(workspace / "target", hidden=8)
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), None, out)
    at.text_input(key="train-pf-folder").input(str(target)).run()
    at.button(key="train-pf-run").click().run()
    assert any("Preflight of `epoch_0_step_20`" in e.value and "2 error(s)" in e.value for e in at.error)  # fc-width, fc-config-mismatch
    assert any(e.value.startswith("**fc-width**") and "3 aux layers × hidden size 8 = 24" in e.value
               for e in at.error)
    at.selectbox(key="train-ckpt-out-pick").set_value("epoch_0_step_10").run()
    at.button(key="train-pf-run").click().run()
    assert any("Preflight of `epoch_0_step_10`" in s.value and "0 error(s), 0 warning(s)" in s.value
               for s in at.success)


@pytest.mark.timeout(120)
def test_measured_accept_len_of_a_checkpoint(workspace):
    from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
    from state.bench import BenchStore

    out = workspace / "out"
    write_checkpoint(out / "epoch_0_step_10")
    write_checkpoint(out / "epoch_0_step_20")
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log, out)
    assert _metric(at, "measured accept_len").value == "N/A"
    store = BenchStore(_runtime(workspace).store)
    for draft, acc in ((out / "epoch_0_step_10", 2.41), (workspace / "elsewhere" / "epoch_0_step_10", 3.9)):
        store.insert(BenchResult("run", config=BenchConfig(target_model="t", draft_model=str(draft), algorithm="EAGLE3"),
                                 load=BenchLoad(concurrency=8), results=BenchFigures(accept_len=acc), server="demo"))
    at.slider(key="train-smooth").set_value(0.0).run()
    assert _metric(at, "measured accept_len").value == "2.41"
    # against the prediction at that checkpoint's step (1.798 at step 10), not the latest one (2.30 at 20)
    assert _metric(at, "measured accept_len").proto.delta == "+0.61 vs predicted at step 10"
    table = _ckpt_table(at)
    assert list(table["measured accept_len"]) == ["N/A", "2.41"]
    star = _trace(_figure(at, "Accept length: predicted and measured"), "measured (benchmark)")
    assert (star["x"], star["y"]) == ([10], [2.41])
    beside = next(d.value for d in at.dataframe if "predicted there" in d.value.columns)
    assert beside.to_dict("records") == [{"checkpoint": "epoch_0_step_10", "step": "10", "measured accept_len": "2.41",
                                          "predicted there": "1.80", "server": "demo", "concurrency": "8",
                                          "benchmark": beside["benchmark"][0]}]
    assert any(e.label == "Benchmarks of this run's checkpoints (1)" for e in at.expander)


# -- runs of the workspace: start, stop and resume through the supervisor ---------------------------------

@pytest.fixture
def train_ws(tmp_path, monkeypatch):
    """The stand-in Gen-2 trainer of tests/train/test_runs.py in a checkout reading SpecForge 0.2.0."""
    import json

    from backend.train.generation import clear_cache
    from tests.supervisor.conftest import _end_group
    from tests.train.test_runs import _config

    clear_cache()
    ws = _config(tmp_path, "0.2.0")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(ws))
    yield ws
    rt = runtime_mod._runtimes.get(ws.resolve())
    if rt is not None:
        for v in rt.supervisor.views():
            if v.live:
                rt.supervisor.stop(v.name, actor="test", source="test", wait=True)
    runtime_mod.close_all()
    for d in (ws / "run").iterdir():
        ident = d / "identity.json"
        if ident.exists():
            rec = json.loads(ident.read_text())
            _end_group(int(rec["pid"]), rec.get("create_time"))
    clear_cache()


def _state(ws: Path) -> str | None:
    v = _runtime(ws).supervisor.view("sf")
    return v.state.value if v is not None else None


@pytest.mark.timeout(180)
def test_start_stop_and_resume_with_the_020_warning(train_ws):
    from state import audit
    from tests.supervisor.conftest import wait_for

    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    assert at.selectbox(key="train-run").value == "sf"
    assert any("**SpecForge generation:** Gen-2 (detected, SpecForge 0.2.0)" == m.value for m in at.markdown)
    assert any("scripts/train_eagle3.py --target-model-path /models/target" in c.value for c in at.code)
    assert any("NOT STARTED" in m.value for m in at.markdown)
    at.button(key="train-start").click().run()
    log = train_ws / "logs" / "sf.log"
    wait_for(lambda: _state(train_ws) == "RUNNING" and log.exists() and "epoch_0_step_4" in log.read_text(),
             timeout_s=60)
    at.run()
    assert any("RUNNING" in m.value and "**sf**" in m.value for m in at.markdown)
    assert int(_metric(at, "step").value.replace(",", "")) >= 4  # the curves follow the run's own log
    assert at.button(key="train-start").disabled and at.button(key="train-resume").disabled

    at.button(key="train-stop").click().run()
    assert any("Stop **sf**?" in w.value for w in at.warning)
    assert _state(train_ws) == "RUNNING"  # nothing stopped before the confirmation
    at.button(key="train-confirm-stop-yes").click().run()
    wait_for(lambda: _state(train_ws) == "EXITED", timeout_s=30)
    assert "got SIGTERM, leaving" in log.read_text()

    at.run()
    at.button(key="train-resume").click().run()
    warning = next(w.value for w in at.warning if w.value.startswith("**Resume sf?**"))
    assert "SpecForge 0.2.0's --resume silently starts over" in warning
    at.run()
    assert _state(train_ws) == "EXITED"  # not resumed until confirmed
    at.button(key="train-confirm-resume-yes").click().run()
    wait_for(lambda: "resume=True" in log.read_text(), timeout_s=60)
    assert _runtime(train_ws).supervisor.view("sf").spec.argv[-1] == "--resume"
    at.run()
    at.button(key="train-stop").click().run()
    at.button(key="train-confirm-stop-yes").click().run()
    wait_for(lambda: _state(train_ws) == "EXITED", timeout_s=30)
    rows = [(r.action, r.outcome, r.source) for r in audit.recent(_runtime(train_ws).store, limit=50)
            if r.target == "sf"][::-1]
    assert rows == [("start", "ok", "dashboard"), ("stop", "ok", "dashboard"), ("resume-confirmed", "ok", "dashboard"),
                    ("start", "ok", "dashboard"), ("stop", "ok", "dashboard")]


@pytest.mark.timeout(180)
def test_resume_cancelled_starts_nothing(train_ws):
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    at.button(key="train-resume").click().run()
    warning = next(w.value for w in at.warning if w.value.startswith("**Resume sf?**"))
    assert "There is no checkpoint in" in warning  # and 0.2.0's: both said before the choice
    at.button(key="train-confirm-resume-no").click().run()
    assert not any(w.value.startswith("**Resume sf?**") for w in at.warning)
    assert _state(train_ws) == "NEVER"


# -- the form: a run created, reviewed with its generation and command, saved to the workspace file ------

FORM = "train-form-new"


def _fill(at: AppTest, **fields) -> AppTest:
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
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    data = at.selectbox(key=f"{FORM}-data-pick")
    assert str(regen / "chat.jsonl") in data.options  # the workspace's regeneration output is offered,
    assert data.value == str(regen / "chat.jsonl")  # and chosen until another is
    _fill(at, **{"name": "mini", "target-typed": "/models/t", "data-pick": str(regen / "chat.jsonl"),
                 "gen": "gen2", "entry": "module:backend.train.tiny train", "epochs": 2, "lr": 3e-3,
                 "ttt": 4, "tracker": "tensorboard"})
    assert "**SpecForge generation:** Gen-2 (chosen)" in [m.value for m in at.markdown]
    cmd = next(c.value for c in at.code if "backend.train.tiny" in c.value)
    assert (f"-m backend.train.tiny train --target-model-path /models/t --train-data-path {regen / 'chat.jsonl'} "
            f"--output-dir {workspace / 'outputs/train/mini'} --num-epochs 2 --batch-size 1 --learning-rate 0.003 "
            "--max-length 2048 --ttt-length 4 --report-to tensorboard") in cmd
    assert "name = \"mini\"" not in (workspace / "specdeck.toml").read_text()  # nothing written before Save
    at.button(key=f"{FORM}-save").click().run()
    text = (workspace / "specdeck.toml").read_text()
    assert '[[train]]\nname = "mini"\ngeneration = "gen2"\nentry = "module:backend.train.tiny train"\n' in text
    assert "num_epochs = 2\n" in text and "ttt_length = 4\n" in text and 'report_to = "tensorboard"' in text
    assert "batch_size" not in text  # SpecForge's default is not written out
    assert at.selectbox(key="train-run").value == "mini"
    assert any("NOT STARTED" in m.value and "**mini**" in m.value for m in at.markdown)


@pytest.mark.timeout(120)
def test_form_shows_the_gen3_yaml(workspace):
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    _fill(at, **{"name": "g3", "target-typed": "/models/t", "data-typed": "data.jsonl", "gen": "gen3",
                 "capture": "http://127.0.0.1:30000", "ttt": 5})
    assert any(m.value.startswith("**Gen-3 config** (written to") for m in at.markdown)
    yaml_text = next(c.value for c in at.code if c.value.startswith("model:"))
    assert "  ttt_length: 5\n" in yaml_text and "run_id: g3\n" in yaml_text
    assert "    server_urls:\n    - http://127.0.0.1:30000" in yaml_text
    assert any(" train --config " in c.value for c in at.code)


@pytest.mark.timeout(120)
def test_form_errors_name_the_field(workspace):
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
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


# -- several runs, restarts, wall time and tracker files ------------------------------------------------

@pytest.mark.timeout(120)
def test_runs_overlaid(workspace):
    a, b = workspace / "a.log", workspace / "b.log"
    a.write_text(gen2_log(), encoding="utf-8")
    b.write_text(gen2_log(steps=10).replace("loss=", "loss=1"), encoding="utf-8")  # 14.90 … 14.00
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    _follow(at, a)
    _follow(at, b)
    assert at.selectbox(key="train-run").value == "b.log"
    at.multiselect(key="train-overlay").select("a.log").run()
    at.slider(key="train-smooth").set_value(0.0).run()
    fig = _figure(at, "Loss")
    assert _trace(fig, "b.log")["y"][-1] == pytest.approx(14.0) and len(_trace(fig, "b.log")["y"]) == 10
    assert _trace(fig, "a.log")["y"][-1] == pytest.approx(3.0) and len(_trace(fig, "a.log")["y"]) == 20
    assert _trace(fig, "a.log")["line"]["color"] != _trace(fig, "b.log")["line"]["color"]
    pos = _figure(at, "acc_i per TTT position")
    assert {"b.log · pos 0", "a.log · pos 0"} <= {t.get("name") for t in pos["data"]}
    assert _metric(at, "step").value == "10"  # the figures are the chosen run's


def test_a_run_appended_to_the_log_breaks_the_lines(tmp_path):
    """The supervisor's line before each run anchors wall time; a second run starts a new line."""
    from datetime import datetime

    from ui.train_data import curves, follower

    mark = "===== specdeck: sf run {n} starting at 2026-11-30 10:00:{s:02d}: python train.py\n"
    log = tmp_path / "sf.log"
    log.write_text(mark.format(n=1, s=0) + gen2_log(steps=3) + "\n" + mark.format(n=2, s=30) + gen2_log(steps=2),
                   encoding="utf-8")
    snap = follower(log).poll()
    c = curves(snap.records, snap.times)
    loss = c.train["loss"]
    assert [round(v, 2) if v is not None else None for v in loss.values] == [4.9, 4.8, 4.7, None, 4.9, 4.8]
    start1 = datetime(2026, 11, 30, 10, 0, 0).timestamp()
    start2 = datetime(2026, 11, 30, 10, 0, 30).timestamp()
    # the bar printed n seconds elapsed at step n: the run's start plus tqdm's elapsed time
    assert [t for t in loss.times if t is not None] == [start1 + 1, start1 + 2, start1 + 3, start2 + 1, start2 + 2]
    assert [t for _, t in c.restarts] == [start2]  # the first run's start is no restart


def test_tensorboard_fills_in_the_learning_rate(tmp_path):
    """Gen-2 prints no lr: its TensorBoard files under <output>/runs have train/lr; a metric the console has
    is not taken twice."""
    from tests.train.test_trackers import frame, scalar_event, version_event
    from ui.train_data import curves, follower

    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    events = frame(version_event()) + b"".join(
        frame(scalar_event(1000.0 + s, s, [("train/lr", 1e-4 * s), ("train/loss", 99.0)])) for s in (1, 2, 3))
    (out / "runs" / "events.out.tfevents.1.host").write_bytes(events)
    log = tmp_path / "train.log"
    log.write_text(gen2_log(steps=3), encoding="utf-8")
    snap = follower(log, out).poll()
    c = curves(snap.records, snap.times, snap.tracker_records)
    assert c.train["lr"].steps == [1.0, 2.0, 3.0]
    assert c.train["lr"].values == pytest.approx([1e-4, 2e-4, 3e-4])
    assert c.train["loss"].values == pytest.approx([4.9, 4.8, 4.7])  # from the console, not the tracker's 99
    assert "TensorBoard files under" in snap.tracker_note


def test_eta_band_and_ema():
    from backend.train.reader import Progress
    from ui.train_data import Curves, Series, ema, eta

    # by hand: n=1 → 1.0; n=2 → (0.5·0.5·1 + 0.5·3) / 0.75 = 2.3333; a gap restarts it
    got = ema([1.0, 3.0, None, 2.0], 0.5)
    assert got[0] == pytest.approx(1.0) and got[1] == pytest.approx(2.3333, abs=1e-4)
    assert got[2] is None and got[3] == pytest.approx(2.0)
    s = Series()
    for i, v in enumerate([9.0, None, 1.0, 2.0, 4.0]):
        s.add(float(i), None, v)
    c = Curves(train={"step_time_s": s})
    e = eta(Progress(step=90, total_steps=100, epoch=0, num_epochs=1, s_per_step=2.0, eta_s=20.0, generation=2), c)
    # 10 steps left; the last times since the gap: 1, 2, 4 s → 10-40 s, tqdm's point 20 s
    assert (e.point_s, e.low_s, e.high_s) == (20.0, 10.0, 40.0)
    assert eta(Progress(90, None, 0, 1, 2.0, None, 2), c).point_s is None


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
        at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
        at.button(key="train-start").click().run()
        wait_for(lambda: (_runtime(ws).supervisor.view("bad").state.value == "EXITED"), timeout_s=30)
        at.run()
        err = next(e.value for e in at.error if e.value.startswith("The run ended with exit code 1"))
        assert "ERROR - /data/train.jsonl: training data file not found" in err
        assert f"`{ws / 'logs' / 'bad.log'}`" in err
        tail = "\n".join(c.value for c in at.code)
        assert "Training Epoch 0:   0%|  | 0/10 [00:00<?, ?it/s]" in tail and "training data file not found" in tail
    finally:
        runtime_mod.close_all()


@pytest.mark.timeout(120)
def test_checkpoints_before_the_output_folder_exists(workspace):
    out = workspace / "out"
    log = workspace / "train.log"
    log.write_text(gen2_log(steps=3), encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log, out)
    assert any(f"`{out}` does not exist yet" in i.value for i in at.info)
    write_checkpoint(out / "epoch_0_step_2", state=(0, 2))
    at.run()
    assert list(_ckpt_table(at)["checkpoint"]) == ["epoch_0_step_2"]
    assert at.selectbox(key="train-ckpt-train.log-pick").value == "epoch_0_step_2"
    write_checkpoint(out / "epoch_0_step_3", state=(0, 3))
    at.run()
    assert at.selectbox(key="train-ckpt-train.log-pick").value == "epoch_0_step_3"  # the newest, until one is picked
    assert _metric(at, "epoch / step").value == "0 / 3"
    at.selectbox(key="train-ckpt-train.log-pick").set_value("epoch_0_step_2").run()
    write_checkpoint(out / "epoch_0_step_4", state=(0, 4))
    at.run()
    assert at.selectbox(key="train-ckpt-train.log-pick").value == "epoch_0_step_2"  # a pick is kept


@pytest.mark.timeout(120)
def test_form_edits_a_run_and_keeps_the_rest(workspace):
    (workspace / "specdeck.toml").write_text(
        '[workspace]\nname = "edit"\n\n# the draft we serve\n[[train]]\nname = "d1"\ngeneration = "gen2"\n'
        'entry = "module:backend.train.tiny train"\ntarget_model = "/models/t"\ntrain_data = "data.jsonl"\n'
        'learning_rate = 1e-4\nextra_args = ["--size", "tiny"]  # kept by hand\n', encoding="utf-8")
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    assert at.selectbox(key="train-run").value == "d1"
    k = "train-form-d1"
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
        at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
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


@pytest.mark.timeout(120)
def test_a_restart_blanks_the_previous_runs_figures(workspace):
    mark = "===== specdeck: sf run {n} starting at 2026-11-30 10:00:{s:02d}: python train.py\n"
    log = workspace / "sf.log"
    log.write_text(mark.format(n=1, s=0) + gen2_log() + "\n" + mark.format(n=2, s=30) + " num_epochs ···· 2\n",
                   encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    assert any("has no training line yet" in i.value for i in at.info)  # the new run's, not run 1's step 20
    assert not any(m.label == "predicted accept length" for m in at.metric)
    with open(log, "a", encoding="utf-8") as f:
        f.write(gen2_log(steps=3))
    at.run()
    assert _metric(at, "step").value == "3"
    assert _metric(at, "loss").value == "4.700" and _metric(at, "loss").proto.delta == "-0.100"
    assert _metric(at, "predicted accept length").value == "N/A"  # run 1's 2.30 is not this run's
    loss = _trace(_figure(at, "Loss"), "loss")  # the chart keeps run 1, its line broken at the restart
    assert None in loss["y"]


@pytest.mark.timeout(120)
def test_a_long_log_is_read_over_several_refreshes(workspace, monkeypatch):
    import ui.train_data

    monkeypatch.setattr(ui.train_data, "POLL_BYTES", 1500)
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    size = log.stat().st_size
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    bars = [p.proto.text for p in at.get("progress") if p.proto.text.startswith("reading the log")]
    assert bars, "the first refresh shows what it read so far and how far it is"
    for _ in range(2 * size // 1500 + 2):
        at.run()
    assert not [p for p in at.get("progress") if p.proto.text.startswith("reading the log")]
    assert _metric(at, "step").value == "20" and _metric(at, "predicted accept length").value == "2.30"


def test_a_quiet_log_is_stale_only_after_the_runs_own_interval(tmp_path):
    """Gen-3 prints a line every log_interval steps: 50 steps at 2 s is 100 s of silence, not a stall; a
    Gen-2 bar redraws every step."""
    from ui.train_curves import expected_gap_s
    from ui.train_data import follower

    g3 = tmp_path / "g3.log"
    g3.write_text("".join(f"step {s}: {{'loss': 2.0, 'acc_0': 0.5, 'perf/optimizer_step_time_s': 2.0}}\n"
                          for s in (50, 100)), encoding="utf-8")
    assert expected_gap_s(follower(g3).poll()) == 100.0
    g2 = tmp_path / "g2.log"
    g2.write_text(gen2_log(steps=3), encoding="utf-8")
    assert expected_gap_s(follower(g2).poll()) == 2.0  # 1.00 s/it, below the page's 2 s refresh


@pytest.mark.timeout(120)
def test_preflight_against_a_managed_servers_target(workspace):
    from tests.helpers import free_port

    target = write_target(workspace / "target", hidden=16)  # the checkpoint's fc takes 3 × 8: another target's
    (workspace / "specdeck.toml").write_text(
        f'[workspace]\nname = "pf"\n\n[[server]]\nname = "sim"\nmodel_path = "{target}"\nport = {free_port()}\n'
        'simulate = true\nsglang_version = "0.5.23"\n', encoding="utf-8")
    out = workspace / "out"
    write_checkpoint(out / "epoch_0_step_10")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), None, out)
    assert at.segmented_control(key="train-pf-how").value == "a managed server's target"
    assert at.selectbox(key="train-pf-server").value == "sim"
    at.button(key="train-pf-run").click().run()
    done = next(x.value for x in at.error if x.value.startswith("Preflight of `epoch_0_step_10`"))
    assert f"server **sim**'s target `{target}`" in done
    assert any(e.value.startswith("**fc-width**") and "3 aux layers × hidden size 16 = 48" in e.value for e in at.error)


def test_steps_sharing_a_second_are_spread_over_it(tmp_path):
    """tqdm prints whole seconds: four steps shown at 00:01 sit 0.25 s apart, not on one instant."""
    from datetime import datetime

    from ui.train_data import follower

    mark = "===== specdeck: sf run 1 starting at 2026-11-30 10:00:00: python train.py\n"
    bars = "".join(f"\rTraining Epoch 0:  10%|#  | {n}/50 [00:{1 if n <= 4 else 2:02d}<00:10,  4.00it/s, "
                   f"loss={5 - n / 10:.2f}, acc=0.10]" for n in range(1, 6))
    log = tmp_path / "fast.log"
    log.write_text(mark + "Training Epoch 0:   0%|  | 0/50 [00:00<?, ?it/s]" + bars + "\n"
                   + "Eval - Step 5 [6/2], position 0,  Acc: 0.40\n", encoding="utf-8")
    snap = follower(log).poll()
    t0 = datetime(2026, 11, 30, 10, 0, 0).timestamp()
    got = {(r.source, r.step): t - t0 for r, t in zip(snap.records, snap.times)
           if r.kind == "metrics" and t is not None}
    assert [got[("bar", n)] for n in range(1, 6)] == pytest.approx([1.0, 1.25, 1.5, 1.75, 2.0])
    assert got[("step_line", 5)] == pytest.approx(2.0)  # printed after step 5's redraw: its time


def test_timestamped_lines_keep_the_bars_on_the_clock(tmp_path):
    """tqdm's elapsed time leaves out what happens between bars (evaluation, saving): a line with its own
    timestamp puts the bars after it back on the clock."""
    from datetime import datetime

    from ui.train_data import follower

    log = tmp_path / "t.log"
    log.write_text("===== specdeck: sf run 1 starting at 2026-11-30 10:00:00: python train.py\n"
                   "Training Epoch 0: 100%|##| 2/2 [00:02<00:00,  1.00s/it, loss=4.00, acc=0.10]\n"
                   "2026-11-30 10:00:30,000 - INFO - Saved model configuration to out/epoch_0_step_2\n"
                   "Training Epoch 1:  50%|# | 1/2 [00:01<00:01,  1.00s/it, loss=3.00, acc=0.20]\n",
                   encoding="utf-8")
    snap = follower(log).poll()
    t0 = datetime(2026, 11, 30, 10, 0, 0).timestamp()
    bars = [t - t0 for r, t in zip(snap.records, snap.times) if r.source == "bar"]
    # epoch 0's bar 2 s after the start; the save at 30 s; epoch 1's first step 1 s after that
    assert bars == pytest.approx([2.0, 31.0])


def test_bars_before_the_first_timestamp_are_placed_from_it(tmp_path):
    """Start-up (loading the target, preparing data) happens before tqdm's clock starts: the first bars are
    placed back from the first timestamped line, not forward from the run's start."""
    from datetime import datetime

    from ui.train_data import follower

    log = tmp_path / "t.log"
    log.write_text("===== specdeck: sf run 1 starting at 2026-11-30 10:00:00: python train.py\n"
                   "Training Epoch 0:  50%|# | 1/2 [00:01<00:01,  1.00s/it, loss=4.00, acc=0.10]\n"
                   "2026-11-30 10:00:21,000 - INFO - Eval - Step 1 [2/2], position 0,  Acc: 0.30\n",
                   encoding="utf-8")
    snap = follower(log).poll()
    t0 = datetime(2026, 11, 30, 10, 0, 0).timestamp()
    bar = next(t for r, t in zip(snap.records, snap.times) if r.source == "bar")
    assert bar - t0 == pytest.approx(21.0)  # 20 s of start-up, then 1 s into the bar


@pytest.mark.timeout(120)
def test_the_overlaid_run_chosen_as_the_run(workspace):
    a, b = workspace / "a.log", workspace / "b.log"
    a.write_text(gen2_log(), encoding="utf-8")
    b.write_text(gen2_log(steps=10), encoding="utf-8")
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    _follow(at, a)
    _follow(at, b)
    at.multiselect(key="train-overlay").select("a.log").run()
    at.selectbox(key="train-run").set_value("a.log").run()
    assert not at.exception, at.exception
    assert at.multiselect(key="train-overlay").value == []  # a run is not drawn over itself
    assert _metric(at, "step").value == "20"


@pytest.mark.timeout(120)
def test_a_gen3_log(workspace):
    """Gen-3 prints `step N: {…}` with lr, per-position acceptance and the optimizer step time."""
    lines = []
    for s, a0 in ((50, 0.5), (100, 0.6)):
        lines.append(f"step {s}: {{'loss': {3 - s / 100}, 'acc_0': {a0}, 'acc_1': 0.5, 'acceptance_rate_0': 0.7, "
                     f"'acceptance_rate_1': 0.5, 'lr': {s * 1e-6}, 'perf/optimizer_step_time_s': 2.0}}\n")
    log = workspace / "g3.log"
    log.write_text("".join(lines), encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    assert _metric(at, "step").value == "100"
    assert _metric(at, "predicted accept length").value == "1.90"  # 1 + .6 + .6·.5
    at.slider(key="train-smooth").set_value(0.0).run()
    lr = _trace(_figure(at, "Learning rate"), "lr")
    assert lr["x"] == [50, 100] and lr["y"] == pytest.approx([5e-5, 1e-4])
    assert _trace(_figure(at, "acceptance_rate_i per TTT position"), "pos 1")["y"] == [0.5, 0.5]
    at.segmented_control(key="train-serving").set_value("sampling").run()
    assert _metric(at, "predicted accept length").value == "2.05"  # 1 + .7 + .7·.5, from acceptance_rate_i


@pytest.mark.timeout(120)
def test_a_gen1_log_by_epoch(workspace):
    """Gen-1 prints per-epoch summaries only: the x axis is the epoch."""
    text = "".join(f"Train Epoch [{e}/2], position {i},  Acc: {a:.2f}\n"
                   for e, accs in ((1, (0.4, 0.2)), (2, (0.5, 0.4))) for i, a in enumerate(accs))
    log = workspace / "g1.log"
    log.write_text(text, encoding="utf-8")
    at = _follow(_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    assert _metric(at, "predicted accept length").value == "1.70"  # 1 + .5 + .5·.4 at epoch 1 (0-based)
    at.slider(key="train-smooth").set_value(0.0).run()
    fig = _figure(at, "acc_i per TTT position")
    assert fig["layout"]["xaxis"]["title"]["text"] == "epoch"
    assert _trace(fig, "pos 0")["x"] == [0, 1] and _trace(fig, "pos 0")["y"] == [0.4, 0.5]
    assert any("at epoch 1 (" in c.value for c in at.caption)
