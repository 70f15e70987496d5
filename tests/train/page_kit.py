"""What the Training page's tests share: a Gen-2 log written here, the workspaces (an empty one, and one
with the stand-in Gen-2 trainer of tests/train/test_runs.py), and functions that open the page through the
frame, follow a log and read its figures and charts."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.helpers import line_charts

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


def page(at: AppTest) -> AppTest:
    at.run()
    at.switch_page("app_pages/training.py")
    at.run()
    assert not at.exception, at.exception
    return at


def open_box(at: AppTest, key: str) -> AppTest:
    """Open the expander of ``key`` (one that builds its content only while open) as a click does: the page
    runs again with it open."""
    if not at.session_state[key] if key in at.session_state else True:
        at.session_state[key] = True
        at.run()
        assert not at.exception, at.exception
    return at


def follow(at: AppTest, log: Path | None, out: Path | None = None) -> AppTest:
    open_box(at, "train-follow-open")
    if log is not None:
        at.text_input(key="train-follow-log").input(str(log))
    if out is not None:
        at.text_input(key="train-follow-out").input(str(out))
    next(b for b in at.button if b.label == "Follow").click()
    at.run()
    assert not at.exception, at.exception
    return at


def open_tab(at: AppTest, name: str) -> AppTest:
    """Switch the page to tab ``name`` (Curves, Checkpoints, Deploy, Run): only the tab on screen is built."""
    at.session_state["train-tab"] = name
    at.run()
    assert not at.exception, at.exception
    return at


def metric(at: AppTest, label: str):
    return next(m for m in at.metric if m.label == label)


def chart_titles(at: AppTest) -> list[str]:
    return [fig["layout"].get("title", {}).get("text") for fig in line_charts(at)]


def figure(at: AppTest, title: str) -> dict:
    for fig in line_charts(at):
        if fig["layout"].get("title", {}).get("text") == title:
            return fig
    raise AssertionError(f"no chart titled {title!r}: {chart_titles(at)}")


def trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t.get("name") == name)


def ckpt_table(at: AppTest):
    return next(d.value for d in at.dataframe if "servable" in d.value.columns)


def runtime_of(workspace: Path):
    return runtime_mod._runtimes[workspace.resolve()]


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


def run_state(ws: Path) -> str | None:
    v = runtime_of(ws).supervisor.view("sf")
    return v.state.value if v is not None else None


def run_workspace(ws: Path, log: str, name: str = "training") -> Path:
    """A workspace at ``ws`` with one Gen-2 training run, ``run``, whose console log (``logs/run.log``) holds
    ``log``: what the Training page shows for a run never started from it.  The browser tests' workspace."""
    import sys

    (ws / "logs").mkdir(parents=True)
    (ws / "specdeck.toml").write_text(
        f'[workspace]\nname = "{name}"\n\n[[train]]\nname = "run"\npython = "{sys.executable}"\n'
        f'generation = "gen2"\nentry = "module:backend.flows.tiny train"\ntarget_model = "{ws}/target"\n'
        f'train_data = "{ws}/data.jsonl"\n', encoding="utf-8")
    (ws / "logs" / "run.log").write_text(log, encoding="utf-8")
    return ws
