"""AppTest of the Training page: curves from logs written here (Gen-2, Gen-3, Gen-1), the smoothing, axis and
prediction controls, the predicted accept length stated, runs overlaid and restarted, and the checkpoints
(written by tests/train/ckpt_files.py) listed, inspected, preflighted and matched to benchmarks."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.train.ckpt_files import eagle3_tensors, write_checkpoint, write_rank_state, write_target
from tests.train.page_kit import (REPO, chart_titles, ckpt_table, figure, follow, gen2_log,  # noqa: F401
                                  metric, open_box, open_tab, page, runtime_of, trace, workspace)

@pytest.mark.timeout(120)
def test_curves_from_a_gen2_log(workspace):
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    assert any(t.value == "Training" for t in at.title)
    assert at.selectbox(key="train-run").value == "train.log"
    assert [p.proto.text for p in at.get("progress")] == ["**20 of 40 steps** (50%) · epoch 1 of 2"]
    assert metric(at, "step").value == "20"
    assert metric(at, "ETA").value == "20 s"  # 20 steps left at 1.00 s/it
    assert metric(at, "loss").value == "3.000"  # 5.00 - 20 × 0.10
    assert metric(at, "loss").proto.delta == "-0.100 vs previous log"  # a delta says what it is against
    assert metric(at, "predicted accept length").value == "2.30"
    assert metric(at, "measured accept_len").value == "N/A"
    stated = next(c.value for c in at.caption if c.value.startswith("**Predicted accept length**"))
    assert "1 + a0 + a0·a1 + a0·a1·a2 + …" in stated and "= **2.30**" in stated
    assert "a0 = 0.80 · a1 = 0.50 · a2 = 0.25" in stated and "not a measurement" in stated
    titles = chart_titles(at)
    for t in ("Loss", "Accept length: predicted and measured", "acc_i per TTT position", "Step time"):
        assert t in titles
    at.slider(key="train-smooth").set_value(0.0).run()  # the values as logged
    pos = figure(at, "acc_i per TTT position")
    assert {t["name"] for t in pos["data"] if t.get("name")} == {"pos 0", "pos 1", "pos 2"}
    assert [trace(pos, f"pos {i}")["y"] for i in range(3)] == [[0.60, 0.80], [0.30, 0.50], [0.10, 0.25]]
    accept = figure(at, "Accept length: predicted and measured")
    # steps 10 and 20: 1 + .6 + .6·.3 + .6·.3·.1 = 1.798, then 2.30
    assert trace(accept, "predicted (1 + a0 + a0·a1 + …)")["y"] == pytest.approx([1.798, 2.30])
    assert any("acceptance_rate_i per TTT position**: N/A" in c.value for c in at.caption)
    assert any("**Learning rate**: N/A" in c.value for c in at.caption)


@pytest.mark.timeout(120)
def test_smoothing_and_x_axis(workspace):
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    at.slider(key="train-smooth").set_value(0.0).run()
    loss = trace(figure(at, "Loss"), "loss")
    assert loss["x"] == list(range(1, 21))
    assert loss["y"] == pytest.approx([5.0 - 0.1 * n for n in range(1, 21)])
    assert figure(at, "Loss")["layout"]["xaxis"]["title"]["text"] == "step"
    at.slider(key="train-smooth").set_value(0.5).run()
    fig = figure(at, "Loss")
    smoothed = trace(fig, "loss")
    # EMA with weight 0.5 and the start-up correction: 4.90, (0.5·4.90 + 4.80)/1.5 = 4.8333, …
    assert smoothed["y"][:2] == pytest.approx([4.90, 4.8333], abs=1e-4)
    raw = [t for t in fig["data"] if t.get("showlegend") is False]
    assert raw and raw[0]["y"] == pytest.approx([5.0 - 0.1 * n for n in range(1, 21)])  # raw kept, faint
    at.segmented_control(key="train-x").set_value("wall time").run()
    fig = figure(at, "Loss")
    assert fig["layout"]["xaxis"]["type"] == "date"
    assert isinstance(trace(fig, "loss")["x"][0], str)  # local date-times, one a second apart (1.00s/it)
    xs = trace(fig, "loss")["x"]
    from datetime import datetime
    assert (datetime.fromisoformat(xs[-1]) - datetime.fromisoformat(xs[0])).total_seconds() == pytest.approx(19)


@pytest.mark.timeout(120)
def test_draft_steps_cap_the_prediction(workspace):
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    at.number_input(key="train-num-steps").set_value(2).run()
    assert metric(at, "predicted accept length").value == "2.20"  # 1 + .8 + .8·.5


@pytest.mark.timeout(120)
def test_sampling_without_acceptance_rate_says_so(workspace):
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    at.segmented_control(key="train-serving").set_value("sampling").run()
    stated = next(c.value for c in at.caption if c.value.startswith("**Predicted accept length**"))
    assert "Gen-2 logs no acceptance_rate_i; acc_i (greedy acceptance) is used instead" in stated


@pytest.mark.timeout(120)
def test_missing_log_and_unreadable_lines(workspace):
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), workspace / "later.log")
    assert any("No log yet at" in i.value for i in at.info)
    log = workspace / "later.log"
    log.write_text(gen2_log(steps=3) + "\nEval - Step x [1/2], position 0,  Acc: 0.5\n", encoding="utf-8")
    at.run()
    assert metric(at, "step").value == "3"
    assert any("1 not readable" in c.value for c in at.caption)
    assert any(e.label.startswith("Lines not read (1") for e in at.expander)


@pytest.mark.timeout(120)
def test_checkpoint_table_and_inspection(workspace):
    out = workspace / "out"
    write_checkpoint(out / "epoch_0_step_10", state=(0, 10))
    write_checkpoint(out / "epoch_0_step_20", state=(0, 20))
    write_checkpoint(out / "epoch_1_step_30", tensors=eagle3_tensors(d2t=False))
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log, out)
    open_tab(at, "Checkpoints")
    table = ckpt_table(at)
    assert list(table["checkpoint"]) == ["epoch_1_step_30", "epoch_0_step_20", "epoch_0_step_10"]
    assert list(table["marks"]) == ["latest", "", ""]
    assert list(table["step"]) == ["30", "20", "10"] and list(table["epoch"]) == ["1", "0", "0"]
    assert list(table["servable"]) == ["yes", "yes", "yes"]
    assert any("best: N/A" in c.value for c in at.caption)
    # the latest is inspected first: no d2t in its weights, no training state
    assert at.selectbox(key="train-ckpt-train.log-pick").value == "epoch_1_step_30"
    assert metric(at, "fc.weight").value == "8 × 24"
    assert metric(at, "d2t / t2d").value == "✕ / ✓"
    assert metric(at, "layers").value == "1"
    assert metric(at, "vocab (target / draft)").value == "32 / 16"
    assert metric(at, "epoch / step").value == "N/A / N/A"
    assert any("no d2t tensor" in w.value for w in at.warning)
    assert at.selectbox(key="train-ckpt-train.log-pick").disabled  # following the newest until turned off
    at.toggle(key="train-ckpt-train.log-newest").set_value(False).run()
    at.selectbox(key="train-ckpt-train.log-pick").set_value("epoch_0_step_20").run()
    assert metric(at, "epoch / step").value == "0 / 20"
    assert metric(at, "d2t / t2d").value == "✓ / ✓"
    assert any(e.label == "training_state.pt args (4)" for e in at.expander)


@pytest.mark.timeout(120)
def test_gen3_runtime_checkpoint_offers_the_export(workspace):
    import os

    out = workspace / "out"
    for step in (100, 200):
        d = out / f"llama-step{step}"
        d.mkdir(parents=True)
        write_rank_state(d / "training_state_rank0.pt")
    os.symlink("llama-step100", out / "llama-latest")
    os.symlink("llama-step200", out / "llama-best")
    at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    open_box(at, "train-follow-open").text_input(key="train-follow-runid").input("llama")
    open_tab(follow(at, None, out), "Checkpoints")
    table = ckpt_table(at)
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
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), None, out)
    open_tab(at, "Checkpoints")
    at.text_input(key="train-pf-folder").input(str(target)).run()
    at.button(key="train-pf-run").click().run()
    assert any("Preflight of `epoch_0_step_20`" in e.value and "2 error(s)" in e.value for e in at.error)  # fc-width, fc-config-mismatch
    assert any(e.value.startswith("**fc-width**") and "3 aux layers × hidden size 8 = 24" in e.value
               for e in at.error)
    at.toggle(key="train-ckpt-out-newest").set_value(False).run()
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
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log, out)
    assert metric(at, "measured accept_len").value == "N/A"
    store = BenchStore(runtime_of(workspace).store)
    for draft, acc in ((out / "epoch_0_step_10", 2.41), (workspace / "elsewhere" / "epoch_0_step_10", 3.9)):
        store.insert(BenchResult("run", config=BenchConfig(target_model="t", draft_model=str(draft), algorithm="EAGLE3"),
                                 load=BenchLoad(concurrency=8), results=BenchFigures(accept_len=acc), server="demo"))
    at.slider(key="train-smooth").set_value(0.0).run()
    assert metric(at, "measured accept_len").value == "2.41"
    # against the prediction at that checkpoint's step (1.798 at step 10), not the latest one (2.30 at 20)
    assert metric(at, "measured accept_len").proto.delta == "+0.61 tokens vs predicted at step 10"
    table = ckpt_table(open_tab(at, "Checkpoints"))
    assert list(table["measured accept_len"]) == ["N/A", "2.41"]
    open_tab(at, "Curves")
    star = trace(figure(at, "Accept length: predicted and measured"), "measured (benchmark)")
    assert (star["x"], star["y"]) == ([10], [2.41])
    beside = next(d.value for d in at.dataframe if "predicted there" in d.value.columns)
    assert beside.to_dict("records") == [{"checkpoint": "epoch_0_step_10", "step": "10", "measured accept_len": "2.41",
                                          "predicted there": "1.80", "server": "demo", "concurrency": "8",
                                          "benchmark": beside["benchmark"][0]}]
    assert any(e.label == "Benchmarks of this run's checkpoints (1)" for e in at.expander)


@pytest.mark.timeout(120)
def test_runs_overlaid(workspace):
    a, b = workspace / "a.log", workspace / "b.log"
    a.write_text(gen2_log(), encoding="utf-8")
    b.write_text(gen2_log(steps=10).replace("loss=", "loss=1"), encoding="utf-8")  # 14.90 … 14.00
    at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    follow(at, a)
    follow(at, b)
    assert at.selectbox(key="train-run").value == "b.log"
    at.multiselect(key="train-overlay").select("a.log").run()
    at.slider(key="train-smooth").set_value(0.0).run()
    fig = figure(at, "Loss")
    assert trace(fig, "b.log")["y"][-1] == pytest.approx(14.0) and len(trace(fig, "b.log")["y"]) == 10
    assert trace(fig, "a.log")["y"][-1] == pytest.approx(3.0) and len(trace(fig, "a.log")["y"]) == 20
    assert trace(fig, "a.log")["line"]["color"] != trace(fig, "b.log")["line"]["color"]
    pos = figure(at, "acc_i per TTT position")
    assert {"b.log · pos 0", "a.log · pos 0"} <= {t.get("name") for t in pos["data"]}
    assert metric(at, "step").value == "10"  # the figures are the chosen run's


@pytest.mark.timeout(120)
def test_checkpoints_before_the_output_folder_exists(workspace):
    out = workspace / "out"
    log = workspace / "train.log"
    log.write_text(gen2_log(steps=3), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log, out)
    open_tab(at, "Checkpoints")
    assert any(f"`{out}` does not exist yet" in i.value for i in at.info)
    write_checkpoint(out / "epoch_0_step_2", state=(0, 2))
    at.run()
    assert list(ckpt_table(at)["checkpoint"]) == ["epoch_0_step_2"]
    assert at.selectbox(key="train-ckpt-train.log-pick").value == "epoch_0_step_2"
    write_checkpoint(out / "epoch_0_step_3", state=(0, 3))
    at.run()
    assert at.selectbox(key="train-ckpt-train.log-pick").value == "epoch_0_step_3"  # the newest, until one is picked
    assert metric(at, "epoch / step").value == "0 / 3"
    at.toggle(key="train-ckpt-train.log-newest").set_value(False).run()
    at.selectbox(key="train-ckpt-train.log-pick").set_value("epoch_0_step_2").run()
    write_checkpoint(out / "epoch_0_step_4", state=(0, 4))
    at.run()
    assert at.selectbox(key="train-ckpt-train.log-pick").value == "epoch_0_step_2"  # a pick is kept


@pytest.mark.timeout(120)
def test_a_restart_blanks_the_previous_runs_figures(workspace):
    mark = "===== specdeck: sf run {n} starting at 2026-11-30 10:00:{s:02d}: python train.py\n"
    log = workspace / "sf.log"
    log.write_text(mark.format(n=1, s=0) + gen2_log() + "\n" + mark.format(n=2, s=30) + " num_epochs ···· 2\n",
                   encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    assert any("has no training line yet" in i.value for i in at.info)  # the new run's, not run 1's step 20
    assert not any(m.label == "predicted accept length" for m in at.metric)
    with open(log, "a", encoding="utf-8") as f:
        f.write(gen2_log(steps=3))
    at.run()
    assert metric(at, "step").value == "3"
    assert metric(at, "loss").value == "4.700" and metric(at, "loss").proto.delta == "-0.100 vs previous log"
    assert metric(at, "predicted accept length").value == "N/A"  # run 1's 2.30 is not this run's
    loss = trace(figure(at, "Loss"), "loss")  # the chart keeps run 1, its line broken at the restart
    assert None in loss["y"]


@pytest.mark.timeout(120)
def test_a_long_log_is_read_over_several_refreshes(workspace, monkeypatch):
    import ui.train.data

    monkeypatch.setattr(ui.train.data, "POLL_BYTES", 300)  # a page run polls up to four times: 1.2 of 4 kB
    monkeypatch.setattr(ui.train.data, "POLL_S", 0.0)  # a poll reads one slice of POLL_BYTES, not more
    monkeypatch.setattr(ui.train.data, "SLICE_BYTES", 700)
    start = ui.train.data.LogFollower._start_catching_up
    monkeypatch.setattr(ui.train.data.LogFollower, "_start_catching_up", lambda self: None)  # held back at first
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    bars = [p.proto.text for p in at.get("progress") if p.proto.text.startswith("reading the log")]
    assert bars, "the first refresh shows what it read so far and how far it is"
    # the rest is read in the background, a slice at a time; the page shows it when it runs again
    monkeypatch.setattr(ui.train.data.LogFollower, "_start_catching_up", start)
    at.run()
    f = ui.train.data.follower(log)
    if f._catching_up is not None:
        f._catching_up.join(30)
    assert not f.poll().catching_up
    at.run()
    assert not [p for p in at.get("progress") if p.proto.text.startswith("reading the log")]
    assert metric(at, "step").value == "20" and metric(at, "predicted accept length").value == "2.30"


@pytest.mark.timeout(120)
def test_preflight_against_a_managed_servers_target(workspace):
    from tests.helpers import free_port

    target = write_target(workspace / "target", hidden=16)  # the checkpoint's fc takes 3 × 8: another target's
    (workspace / "specdeck.toml").write_text(
        f'[workspace]\nname = "pf"\n\n[[server]]\nname = "sim"\nmodel_path = "{target}"\nport = {free_port()}\n'
        'simulate = true\nsglang_version = "0.5.23"\n', encoding="utf-8")
    out = workspace / "out"
    write_checkpoint(out / "epoch_0_step_10")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), None, out)
    open_tab(at, "Checkpoints")
    assert at.segmented_control(key="train-pf-how").value == "a managed server's target"
    assert at.selectbox(key="train-pf-server").value == "sim"
    at.button(key="train-pf-run").click().run()
    done = next(x.value for x in at.error if x.value.startswith("Preflight of `epoch_0_step_10`"))
    assert f"server **sim**'s target `{target}`" in done
    assert any(e.value.startswith("**fc-width**") and "3 aux layers × hidden size 16 = 48" in e.value for e in at.error)


@pytest.mark.timeout(120)
def test_the_overlaid_run_chosen_as_the_run(workspace):
    a, b = workspace / "a.log", workspace / "b.log"
    a.write_text(gen2_log(), encoding="utf-8")
    b.write_text(gen2_log(steps=10), encoding="utf-8")
    at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    follow(at, a)
    follow(at, b)
    at.multiselect(key="train-overlay").select("a.log").run()
    at.selectbox(key="train-run").set_value("a.log").run()
    assert not at.exception, at.exception
    assert at.multiselect(key="train-overlay").value == []  # a run is not drawn over itself
    assert metric(at, "step").value == "20"


@pytest.mark.timeout(120)
def test_a_gen3_log(workspace):
    """Gen-3 prints `step N: {…}` with lr, per-position acceptance and the optimizer step time."""
    lines = []
    for s, a0 in ((50, 0.5), (100, 0.6)):
        lines.append(f"step {s}: {{'loss': {3 - s / 100}, 'acc_0': {a0}, 'acc_1': 0.5, 'acceptance_rate_0': 0.7, "
                     f"'acceptance_rate_1': 0.5, 'lr': {s * 1e-6}, 'perf/optimizer_step_time_s': 2.0}}\n")
    log = workspace / "g3.log"
    log.write_text("".join(lines), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    assert metric(at, "step").value == "100"
    assert metric(at, "predicted accept length").value == "1.90"  # 1 + .6 + .6·.5
    at.slider(key="train-smooth").set_value(0.0).run()
    lr = trace(figure(at, "Learning rate"), "lr")
    assert lr["x"] == [50, 100] and lr["y"] == pytest.approx([5e-5, 1e-4])
    assert trace(figure(at, "acceptance_rate_i per TTT position"), "pos 1")["y"] == [0.5, 0.5]
    at.segmented_control(key="train-serving").set_value("sampling").run()
    assert metric(at, "predicted accept length").value == "2.05"  # 1 + .7 + .7·.5, from acceptance_rate_i


@pytest.mark.timeout(120)
def test_a_gen1_log_by_epoch(workspace):
    """Gen-1 prints per-epoch summaries only: the x axis is the epoch."""
    text = "".join(f"Train Epoch [{e}/2], position {i},  Acc: {a:.2f}\n"
                   for e, accs in ((1, (0.4, 0.2)), (2, (0.5, 0.4))) for i, a in enumerate(accs))
    log = workspace / "g1.log"
    log.write_text(text, encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
    assert metric(at, "predicted accept length").value == "1.70"  # 1 + .5 + .5·.4 at epoch 1 (0-based)
    at.slider(key="train-smooth").set_value(0.0).run()
    fig = figure(at, "acc_i per TTT position")
    assert fig["layout"]["xaxis"]["title"]["text"] == "epoch"
    assert trace(fig, "pos 0")["x"] == [0, 1] and trace(fig, "pos 0")["y"] == [0.4, 0.5]
    assert any("at epoch 1 (" in c.value for c in at.caption)


@pytest.mark.timeout(120)
def test_a_relative_path_is_taken_from_the_workspace_folder(workspace):
    (workspace / "runs").mkdir()
    (workspace / "runs" / "train.log").write_text(gen2_log(), encoding="utf-8")
    write_checkpoint(workspace / "runs" / "out" / "epoch_0_step_10")
    at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    open_box(at, "train-follow-open").text_input(key="train-follow-log").input("runs/train.log")
    at.text_input(key="train-follow-out").input("runs/out")
    next(b for b in at.button if b.label == "Follow").click()
    at.run()
    assert metric(at, "step").value == "20"
    assert list(ckpt_table(open_tab(at, "Checkpoints"))["checkpoint"]) == ["epoch_0_step_10"]


def test_the_page_names_the_trainer_only_from_evidence(workspace):
    """A log whose only SpecForge-looking lines are a progress bar (NeMo Automodel's EAGLE-3 training)
    reads "unknown trainer"; a line only Gen-3 prints names Gen-3."""
    from tests.train.test_trainer_evidence import AUTOMODEL, GEN3_STEP

    def status(text: str) -> str:
        log = workspace / "who.log"
        log.write_text(text, encoding="utf-8")
        at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)
        return next(m.value for m in at.markdown if " log " in m.value and "who.log" in m.value)

    assert status(AUTOMODEL).startswith("unknown trainer log")
    assert status(GEN3_STEP).startswith("SpecForge Gen-3 log")


def test_accept_len_per_dataset_of_each_checkpoint(workspace):
    """Benchmarks of a run's checkpoints on held-out prompts of each dataset: one row per checkpoint and load,
    a column per dataset, newest checkpoint first, and the dataset the newest one accepts least on named."""
    from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
    from state.bench import BenchStore

    out = workspace / "out"
    write_checkpoint(out / "epoch_0_step_10")
    write_checkpoint(out / "epoch_0_step_20")
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log, out)
    open_tab(at, "Checkpoints")
    assert any("no benchmark of these checkpoints records the dataset" in c.value for c in at.caption)
    store = BenchStore(runtime_of(workspace).store)
    for ck, ds, acc in (("epoch_0_step_10", "math", 2.1), ("epoch_0_step_10", "chat", 1.7),
                        ("epoch_0_step_20", "math", 2.9), ("epoch_0_step_20", "chat", 1.9),
                        ("epoch_0_step_20", "code", 2.4), ("epoch_0_step_20", "", 3.3)):  # no dataset: left out
        store.insert(BenchResult("run", config=BenchConfig(target_model="t", draft_model=str(out / ck),
                                                           algorithm="EAGLE3"),
                                 load=BenchLoad(concurrency=1, input_len=256, output_len=256, dataset=ds or None),
                                 results=BenchFigures(accept_len=acc, output_tok_s=100 * acc), server="demo"))
    # a benchmark of another run's checkpoint of the same name is not this run's
    store.insert(BenchResult("run", config=BenchConfig(target_model="t", draft_model=str(workspace / "other" /
                                                                                          "epoch_0_step_20"),
                                                       algorithm="EAGLE3"),
                             load=BenchLoad(concurrency=1, input_len=256, output_len=256, dataset="math"),
                             results=BenchFigures(accept_len=9.0), server="demo"))
    at.run()
    df = next(d.value for d in at.dataframe if "math · accept_len" in d.value.columns)
    assert list(df["checkpoint"]) == ["epoch_0_step_20", "epoch_0_step_10"]
    rows = df.set_index("checkpoint")
    assert rows.loc["epoch_0_step_20", "math · accept_len"] == 2.9 and rows.loc["epoch_0_step_20", "chat · accept_len"] == 1.9
    assert rows.loc["epoch_0_step_10", "chat · accept_len"] == 1.7
    assert str(rows.loc["epoch_0_step_10", "code · accept_len"]) == "nan"  # not measured there
    assert any("Lowest on the newest checkpoint measured: **chat (1.90, epoch_0_step_20)**" in c.value
               for c in at.caption)
