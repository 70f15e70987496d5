"""AppTest of the Training page: curves from a Gen-2 log written here, the controls, the predicted accept
length, the checkpoint table from folders written by tests/train/ckpt_files.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.train.ckpt_files import draft_config, eagle3_tensors, write_checkpoint, write_target

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
    return next(d.value for d in at.dataframe if "checkpoint" in d.value.columns)


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
    for draft, acc in ((out / "epoch_0_step_20", 2.41), (workspace / "elsewhere" / "epoch_0_step_20", 3.9)):
        store.insert(BenchResult("run", config=BenchConfig(target_model="t", draft_model=str(draft), algorithm="EAGLE3"),
                                 load=BenchLoad(concurrency=8), results=BenchFigures(accept_len=acc), server="demo"))
    at.slider(key="train-smooth").set_value(0.0).run()
    assert _metric(at, "measured accept_len").value == "2.41"
    assert _metric(at, "measured accept_len").proto.delta == "+0.11 vs predicted"  # 2.41 - 2.30
    table = _ckpt_table(at)
    assert list(table["measured accept_len"]) == ["2.41", "N/A"]
    star = _trace(_figure(at, "Accept length: predicted and measured"), "measured (benchmark)")
    assert (star["x"], star["y"]) == ([20], [2.41])
