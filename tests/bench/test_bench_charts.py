"""The Benchmarks page's charts: a baseline drawn only beside the runs of its own target (never one server's
baseline across another server's run), a configured single-stream baseline named as such, and the EAGLE
mistake (accept_len 1.0, no tok/s) on the accept_len chart instead of vanishing."""

from __future__ import annotations

import json
from pathlib import Path

from backend.bench.demo_history import HISTORY_CSV
from backend.bench.importers import import_file
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
from tests.bench.test_runs_table import LLAMA, workspace  # noqa: F401 (the fixture)
from tests.helpers import open_page
from ui.bench import charts


def _history(tmp_path: Path) -> list[BenchResult]:
    path = tmp_path / "history.csv"
    path.write_text(HISTORY_CSV)
    return [r.with_id(i + 1) for i, r in enumerate(import_file(path).results)]


def _llama(tok: float | None = 66.4, acc: float | None = 1.8, id: int = 10) -> BenchResult:
    return BenchResult(source="run", server="llama",
                       config=BenchConfig(target_model=LLAMA, algorithm="EAGLE3", draft_model="llama-eagle3"),
                       load=BenchLoad(concurrency=1), results=BenchFigures(output_tok_s=tok, accept_len=acc),
                       started_at=1_790_000_000.0).with_id(id)


def _texts(fig) -> str:
    return " ".join(str(t.name) + " " + " ".join(map(str, t.text or ())) for t in fig.data)


def test_each_target_has_its_own_tok_s_chart_and_only_its_own_baseline(tmp_path):
    results = _history(tmp_path) + [_llama()]
    groups = charts.by_target(results)
    assert set(groups) == {"GLM-5-NVFP4", LLAMA}
    glm = charts.tok_s_figure(groups["GLM-5-NVFP4"], title="GLM-5-NVFP4")
    llama = charts.tok_s_figure(groups[LLAMA], title=LLAMA)
    assert "baseline 90.0" in _texts(glm) and "llama" not in _texts(glm)
    assert "glm5" not in _texts(llama) and "baseline" not in _texts(llama)  # no stored, none configured
    configured = {"llama": ("/m/" + LLAMA, None, 90.0)}
    llama = charts.tok_s_figure(groups[LLAMA], title=LLAMA, configured=configured)
    assert "configured baseline 90.0" in _texts(llama) and "glm5" not in _texts(llama)
    assert "configured" not in _texts(charts.tok_s_figure(groups["GLM-5-NVFP4"], configured=configured))


def test_the_eagle_mistake_is_on_the_accept_len_chart(tmp_path):
    results = _history(tmp_path)
    fig, missing = charts.accept_figure(results)
    (mistake,) = [t for t in fig.data if "tok/s not" in t.name]
    assert list(mistake.x) == [1.0] and "#2 glm5: accept_len 1.00, tok/s N/A" in mistake.text
    assert missing == 1  # the other drafter: tok/s without accept_len
    assert min(fig.layout.xaxis.range) < 1.0  # the marker at 1.00 is inside the axis


def test_the_charts_tab_draws_a_chart_per_target(workspace):  # noqa: F811
    at = open_page("app_pages/benchmarks.py")
    # on the Runs tab the charts are not built: they would be drawn hidden behind the table
    assert not [e for e in at.get("plotly_chart") if "Output tok/s against concurrency" in e.proto.spec]
    at.session_state["bench-tab"] = "Charts"  # what choosing the tab does (the page runs again)
    at.run()
    specs = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]
    tok = [s for s in specs if "Output tok/s against concurrency" in s["layout"]["title"]["text"]]
    assert sorted(s["layout"]["title"]["text"].split(": ")[1] for s in tok) == ["GLM-5-NVFP4", LLAMA]
    for s in tok:
        names = " ".join(str(t.get("name")) + " " + " ".join(map(str, t.get("text") or [])) for t in s["data"])
        mine = s["layout"]["title"]["text"].split(": ")[1]
        assert ("glm5" in names) == (mine == "GLM-5-NVFP4") and ("llama ·" in names) == (mine == LLAMA)
    acc = next(s for s in specs if s["layout"]["title"]["text"] == "tok/s against accept_len")
    assert any("accept_len 1.00, tok/s N/A" in " ".join(t.get("text") or []) for t in acc["data"])
    assert not at.exception, at.exception
