"""AppTest of the Regeneration page's accept_len per dataset (beside each dataset's bar, N/A with
why) and of its deep link (?job=NAME selects the run, ?view=specforge the view; a value naming
nothing here is ignored with a note)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.helpers import close_runtime
from tests.regen.regen_fixtures import append, snap

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(180)


def _ds(total, done, spec_rows=None, tokens=0, vct=0):
    d = {"total": total, "done": done, "failed": 0, "skipped": 0}
    if spec_rows:
        d.update(spec_rows=spec_rows, spec_tokens=tokens, spec_verify_ct=vct, accept_len=round(tokens / vct, 4))
    return d


def _run(root: Path, stem: str, datasets: dict, *, t_offset: float = 0.0) -> Path:
    reg = root / "outputs" / "regen"
    reg.mkdir(parents=True, exist_ok=True)
    now = time.time() - t_offset
    done = sum(d["done"] for d in datasets.values())
    total = sum(d["total"] for d in datasets.values())
    append(reg / f"{stem}.progress.jsonl", snap(now - 10, 0, total=total, started_at=now - 20),
           snap(now, done, total=total, started_at=now - 20, req_s=1.0, tok_s=100.0, datasets=datasets,
                spec_recorded=True))
    return reg / f"{stem}.jsonl"


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "regen-accept"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # "mixed": two datasets speculated at different lengths; "plain": a server that gives no figures
    _run(tmp_path, "mixed", {"math": _ds(100, 40, 40, 12_800, 4_000), "chat": _ds(100, 30, 30, 5_400, 3_000)})
    _run(tmp_path, "plain", {"chat": _ds(50, 20, 0)}, t_offset=1)
    yield tmp_path
    close_runtime(tmp_path)


def _page(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60).run()
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.switch_page("app_pages/regeneration.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _bars(at) -> list[str]:
    return [p.proto.text for p in at.get("progress")]


def _captions(at) -> str:
    return "\n".join(str(c.value) for c in at.caption)


def _param(at, name):
    if name not in at.query_params:
        return None
    v = at.query_params[name]
    return v[-1] if isinstance(v, list) and v else v


def test_link_opens_the_run_and_shows_accept_len_per_dataset(workspace):
    at = _page({"job": "regen-mixed"})
    assert at.selectbox(key="regen-run").value.endswith("mixed.jsonl")
    bars = _bars(at)
    assert "math: 40 / 100 · accept_len 3.20" in bars
    assert "chat: 30 / 100 · accept_len 1.80" in bars
    assert "accept_len N/A" not in _captions(at)
    assert _param(at, "job") == "regen-mixed"
    # the user's choice afterwards is the page's, and the URL follows it
    at.selectbox(key="regen-run").select(str(workspace / "outputs" / "regen" / "plain.jsonl")).run()
    assert not at.exception, at.exception
    assert _param(at, "job") == "regen-plain"
    assert "chat: 20 / 50" in _bars(at)  # no figure anywhere: one line says why
    assert "accept_len N/A: the server's answers carried no speculative figures" in _captions(at)


def test_a_bad_job_in_the_link_is_ignored_with_a_note(workspace):
    at = _page({"job": "regen-nope"})
    assert "`job=regen-nope` is not a regeneration run here: ignored" in _captions(at)
    assert at.selectbox(key="regen-run").value  # a run is still shown
    assert _param(at, "job") in ("regen-mixed", "regen-plain")


def test_view_link_and_a_bad_view(workspace):
    at = _page({"view": "specforge"})
    assert at.session_state["regen-mode"] == "SpecForge's regenerate_train_data.py"
    assert at.text_input(key="regen-sf-in") is not None
    assert _param(at, "view") == "specforge"
    at = _page({"view": "sideways"})
    assert "`view=sideways` is not a view (job or specforge) here: ignored" in _captions(at)
    assert at.session_state["regen-mode"] == "Specdeck job"
    assert _param(at, "view") is None


def test_the_n_a_sentences():
    from ui.regen.blocks import accept_len_note, accept_len_text

    def note(**ds):
        return accept_len_note({"datasets": ds, "spec_recorded": True})
    assert accept_len_note({"datasets": {"a": _ds(3, 3)}}).startswith("accept_len N/A: this run's progress log holds no")
    assert note(a=_ds(3, 0)) == "accept_len N/A until a row is done."
    assert note(a=_ds(3, 3)).startswith("accept_len N/A: the server's answers carried no speculative figures")
    assert note(a=_ds(3, 3, 3, 9, 3), b=_ds(3, 2)).startswith("accept_len N/A for b:")
    assert note(a=_ds(3, 3, 2, 9, 3)) == "accept_len of a counts only the rows whose answers gave figures."
    assert note(a=_ds(3, 3, 3, 9, 3)) is None
    assert accept_len_text(_ds(3, 3, 3, 9, 4)) == "accept_len 2.25"
