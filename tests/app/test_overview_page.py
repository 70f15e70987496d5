"""AppTest of the Overview: a running regeneration's rows, rate and ETA band; each server's accept_len and tok/s
against its baseline with the Servers page's steady-window verdict, worded plainly where there is none yet;
Relaunch opening the Servers page on the server; alerts, GPUs, cost (N/A with its reason, a run followed from
its progress log included); each tile in its own bordered container, linking to its page."""

from __future__ import annotations

import html as pyhtml
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import pytest
from streamlit.testing.v1 import AppTest

from backend.sglang.runs import RunInfo
from tests.helpers import close_runtime
from tests.simws import make_models, page_workspace
from ui import overview_data

REPO = Path(__file__).resolve().parents[2]
APP = str(REPO / "app.py")  # the Overview is the page at /
REAL_REGEN_JOBS = overview_data.regen_jobs  # the fixture puts a job with a process in its place


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _decode(t: float, accept: float, tput: float, running: int) -> str:
    return (f"[{_stamp(t)} TP0] Decode batch. #running-req: {running}, #token: 4000, token usage: 0.25, "
            f"accept len: {accept:.2f}, cuda graph: True, gen throughput (token/s): {tput:.2f}, #queue-req: 0, \n")


def _wait_decode(rt, n: int) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        rt.fleet.monitor("sim").refresh(http=False)
        if len(rt.fleet.snapshot("sim").decode["ts"]) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"the monitor did not read {n} decode lines")


def _progress(out: Path, now: float) -> None:
    """A running job's progress log: 5 snapshots a minute apart, 50 rows a minute, 400 of 1,000 asked."""
    lines = []
    for i in range(5):
        t = now - 240 + 60 * i
        done = 200 + 50 * i
        lines.append({"t": t, "state": "running", "total": 1000, "done": done - 10, "failed": 10, "skipped": 0,
                      "remaining": 1000 - done, "in_flight": 8, "req_s": 50 / 60, "tok_s": 410.0,
                      "started_at": now - 600, "servers": {"http://127.0.0.1:1": {"name": "sim", "state": "up"}}})
    out.with_name(out.name[: -len(".jsonl")] + ".progress.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture
def overview(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "m", draft="draft")
    rt, log = page_workspace(tmp_path, monkeypatch, "overview", target, draft)
    runs: dict[str, RunInfo] = {}
    monkeypatch.setattr(rt.fleet, "_run", lambda name: runs.get(name))
    now = time.time()
    out = tmp_path / "outputs" / "regen-a.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    _progress(out, now)
    # a regeneration job of this workspace whose process runs (this test starts none)
    job = SimpleNamespace(name="regen-a", meta={"kind": "regen", "out": str(out)})
    view = SimpleNamespace(name="regen-a", live=True, started_at=now - 600, ended_at=None, state_since=now - 600,
                           spec=SimpleNamespace(env={}))
    monkeypatch.setattr(overview_data, "regen_jobs", lambda rt_: [(job, view)])
    yield rt, log, runs, now
    close_runtime(tmp_path)


def _plain(text: object) -> str:
    """A markdown body as read: the page keeps phrases on one line with no-break spaces."""
    return str(text).replace("\u00a0", " ")


def _text(at: AppTest) -> str:
    return "\n".join([_plain(m.value) for m in at.markdown] + [_plain(c.value) for c in at.caption])


def _markdown(at: AppTest, *, containing: str = "", starting: str = ""):
    """The first markdown element whose text (no-break spaces read as spaces) contains / starts with ..."""
    return next(m for m in at.markdown if containing in _plain(m.value) and _plain(m.value).startswith(starting))


class CostRow(NamedTuple):
    text: str  # what the row shows after its label
    why: str  # its hover ("" where there is none)
    html: str = ""  # the row's markup after its label


def _cost_rows(at: AppTest) -> dict[str, CostRow]:
    """The Cost tile's rows by label: ``<div><b>LABEL</b> <span class="ov-why" title="WHY">TEXT</span></div>``."""
    body = next(str(h.proto.body) for h in at.get("html") if 'class="ov-cost"' in str(h.proto.body))
    rows = {}
    for m in re.finditer(r"<div><b>([^<]+)</b> (.*?)</div>", body):
        inner = m[2]
        title = re.search(r'title="([^"]*)"', inner)
        text = _plain(pyhtml.unescape(re.sub(r"<[^>]+>", "", inner)))
        rows[m[1]] = CostRow(text, pyhtml.unescape(title[1]) if title else "", inner)
    return rows


def _blocks(node, out=None) -> list:
    """Every container block under ``node``: (its key, bordered, its child nodes)."""
    out = [] if out is None else out
    proto = getattr(node, "proto", None)
    children = getattr(node, "children", None) or {}
    if proto is not None and type(proto).__name__ == "Block" and proto.WhichOneof("type") == "flex_container":
        key = proto.id.rsplit("-", 1)[-1] if "-ov-" not in proto.id else "ov-" + proto.id.split("-ov-", 1)[1]
        out.append((key, proto.flex_container.border, node))
    for child in (children.values() if isinstance(children, dict) else children):
        _blocks(child, out)
    return out


def _leaves(node) -> list:
    children = getattr(node, "children", None)
    if not children:
        return [node]
    return [leaf for c in (children.values() if isinstance(children, dict) else children) for leaf in _leaves(c)]


@pytest.mark.timeout(120)
def test_the_three_answers_and_the_tiles(overview):
    rt, log, runs, now = overview
    t0 = now - 60
    # a steady window: single-stream decode lines over the last 20 s at 192 tok/s (baseline 90: faster)
    log.write_text(f"===== specdeck: sim run r1 starting at {_stamp(t0)}: python -m backend.sim.server\n"
                   f"[{_stamp(t0 + 10)}] The server is fired up and ready to roll!\n"
                   + "".join(_decode(now - s, 2.31, 192.0, 1) for s in (19, 14, 9, 5, 1)))
    runs["sim"] = RunInfo("r1", t0 + 0.2, True)
    _wait_decode(rt, 5)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    # regeneration: rows asked of those to ask, the rate, the ETA band with its point
    bar = at.get("progress")[0]
    assert "400 / 1,000 rows (40%)" in bar.proto.text and "10 failed" in bar.proto.text
    # the ETA band on its line, the rates on the next: the same two lines at any width
    eta_line = _plain(_markdown(at, containing="ETA").value)
    assert "(point" in eta_line and "ETA N/A" not in eta_line and "rows/s" not in eta_line
    assert _plain(_markdown(at, containing="rows/s").value) == "0.83 rows/s · 410.0 tok/s"
    # servers: state · speculation, accept_len, the per-request tok/s against the configured single-stream
    # baseline, the verdict, one line each; a phrase never breaks inside (a figure and its unit)
    raw = _markdown(at, containing="accept_len").value
    lines = _plain(raw).split("  \n")
    assert len(lines) == 4, lines
    assert lines[0].endswith("] · EAGLE3")
    assert lines[1].startswith("accept_len **") and "2.31" in lines[1] and "(lifetime" in lines[1]
    assert lines[2] == "per-request tok/s **192.0** vs baseline 90.0"
    assert "faster" in lines[3] and ":green[" in lines[3]
    assert "vs\u00a0baseline\u00a090.0" in raw and "per-request\u00a0tok/s" in raw
    line = _plain(raw)
    # the same verdict as the Servers page computes for this window
    from backend.sglang.monitor import steady_verdict

    snap = rt.fleet.snapshot("sim")
    dec = snap.run_decode if snap.run_decode is not None else snap.decode
    v = steady_verdict(dec["ts"], dec["gen_throughput"], dec["running_req"], 90.0, 1, now=time.time())
    assert v.verdict == "faster" and v.badge in line
    # the server's name on one line (an ellipsis at worst, whole on hover) beside its button
    server = next(node for key, _b, node in _blocks(at.main) if key == "ov-srv-0")
    row = next(node for _k, _b, node in _blocks(server) if node.proto.flex_container.direction == 2)  # HORIZONTAL
    leaves = _leaves(row)
    assert [type(leaf.proto).__name__ for leaf in leaves] == ["Markdown", "PageLink"]
    assert _plain(leaves[0].value) == "**sim**" and leaves[0].proto.wrap is False
    # Relaunch…: a link to the Servers page on the server with its panel open (the page reads both from its query)
    assert leaves[1].proto.label in ("Relaunch…", "Start…")
    assert leaves[1].proto.page == "servers" and leaves[1].proto.query_string == "server=sim&panel=relaunch"
    assert not leaves[1].proto.disabled
    # every tile's link
    links = {p.proto.page for p in at.get("page_link")}
    assert {"regeneration", "servers", "processes", "gpus", "training", "benchmarks"} <= links, links
    # GPUs (the fake source's eight) and cost: the regeneration job's server sets no GPUs, so N/A with why
    row = _cost_rows(at)["Regeneration"]
    assert row.text == "N/A (GPUs not known)"  # unknown, never 0
    assert "server sim's config sets no gpus" in row.why
    html = "".join(str(h.proto.body) for h in at.get("html"))
    assert html.count('class="ov-gpu"') == 8  # the fake source's eight GPUs
    assert "grid-template-columns: repeat(4," in html  # in rows of four at any width


@pytest.mark.timeout(120)
def test_each_tile_has_its_own_bordered_container(overview):
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    tiles = {key: node for key, border, node in _blocks(at.main) if border}
    assert {"ov-regen", "ov-servers", "ov-alerts", "ov-gpus", "ov-training", "ov-bench", "ov-cost"} <= set(tiles)

    def heading(node) -> str:
        first = _leaves(node)[0]
        return first.proto.label if type(first.proto).__name__ == "PageLink" else _plain(first.value)

    assert heading(tiles["ov-training"]) == "Training" and heading(tiles["ov-bench"]) == "Benchmarks"
    assert heading(tiles["ov-cost"]).endswith("Cost")
    # the Training tile holds no benchmark and the Benchmarks tile no cost: one subject each
    train_text = " ".join(_plain(getattr(leaf, "value", "")) for leaf in _leaves(tiles["ov-training"])[1:])
    assert "No training run" in train_text and "benchmark" not in train_text.lower()
    bench_text = [_plain(getattr(leaf, "value", "")) for leaf in _leaves(tiles["ov-bench"])[1:]]
    assert bench_text == ["No result yet: run one on the Benchmarks page."]
    cost_html = [leaf for leaf in _leaves(tiles["ov-cost"]) if type(leaf.proto).__name__ == "Html"]
    assert len(cost_html) == 1
    rows = _cost_rows(at)
    assert list(rows) == ["Regeneration", "Training", "Benchmarks"]
    assert rows["Training"][:2] == ("N/A (no run in the workspace)", "")  # no job: nothing to explain
    assert rows["Benchmarks"][:2] == ("N/A (no result yet)", "")


@pytest.mark.timeout(120)
def test_a_window_filling_up_says_no_verdict_yet_with_the_servers_pages_sentence(overview):
    rt, log, runs, now = overview
    t0 = now - 60
    # one request in flight for the last 5 s only: steady for 5 of the 20 s a verdict needs
    log.write_text(f"===== specdeck: sim run r1 starting at {_stamp(t0)}: python -m backend.sim.server\n"
                   f"[{_stamp(t0 + 10)}] The server is fired up and ready to roll!\n"
                   + "".join(_decode(now - s, 2.31, 192.0, 1) for s in (6, 3, 1)))
    runs["sim"] = RunInfo("r1", t0 + 0.2, True)
    _wait_decode(rt, 3)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    m = _markdown(at, containing="accept_len")
    verdict = _plain(m.value).split("  \n")[-1]
    assert re.fullmatch(r"\*\*no verdict yet: \d+ of 20 s steady\*\*", verdict), verdict
    # the hover: the Servers page's own sentence, then the rule and the baseline
    assert "Verdict: no verdict: steady at the baseline's load (1 request in flight) for" in m.proto.help
    assert "of the 20 s needed" in m.proto.help and "only after 20 s" in m.proto.help
    assert "configured single-stream baseline 90.0 tok/s" in m.proto.help


def test_verdict_words_for_each_case_follow_the_servers_page():
    from backend.sglang.monitor import steady_verdict

    now = 1000.0
    ts = [now - 6, now - 3, now - 1]

    def words(ts_, tput, running, base=90.0, load=1):
        v = steady_verdict(ts_, tput, running, base, load, now=now)
        return v, overview_data.verdict_words(v)

    v, w = words(ts, [192.0] * 3, [1] * 3)
    assert v.short == "steady 5 of 20 s" and w == "no verdict yet: 5 of 20 s steady"
    assert words([], [], [])[1] == "no verdict: idle, no request running"
    assert words(ts, [192.0] * 3, [3] * 3)[1] == "no verdict: the load differs"
    assert words(ts, [192.0] * 3, [1] * 3, base=None)[1] == "no verdict: no baseline"
    full = [now - s for s in (19, 14, 9, 5, 1)]
    v, w = words(full, [192.0] * 5, [1] * 5)
    assert v.verdict == "faster" and w == v.badge  # a verdict: the Servers page's badge as it is
    help_ = overview_data.verdict_help(v, "configured single-stream baseline 90.0 tok/s")
    assert help_.startswith(f"Verdict: {v.sentence}.") and "within ±3 % on par" in help_


@pytest.mark.timeout(120)
def test_relaunch_opens_the_servers_page_on_the_server_with_its_panel(overview):
    rt, log, runs, now = overview
    log.write_text(_decode(now - 2, 1.0, 80.0, 3))
    _wait_decode(rt, 1)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    line = _plain(_markdown(at, containing="accept_len").value)
    # three requests in flight against a single-stream baseline: no verdict, uncoloured
    assert line.endswith("**no verdict: the load differs**")
    assert "load differs from the baseline's (baseline: 1 request in flight" in _markdown(
        at, containing="accept_len").proto.help and ":green[" not in line and ":red[**" not in line
    (link,) = [p for p in at.get("page_link") if p.proto.label in ("Relaunch…", "Start…")]
    assert link.proto.query_string == "server=sim&panel=relaunch"
    # the Servers page opened by that link (its query) shows the server with its panel open
    servers = AppTest.from_file(APP, default_timeout=60)
    servers.switch_page("app_pages/servers.py")
    servers.query_params.update({"server": "sim", "panel": "relaunch"})
    servers.run()
    assert not servers.exception, servers.exception
    assert servers.session_state["srv-selected"] == "sim" and servers.session_state["srv-launch-open"] is True


@pytest.mark.timeout(120)
def test_an_ended_job_shows_no_eta_or_rate(overview, monkeypatch):
    rt, log, runs, now = overview
    job, view = overview_data.regen_jobs(rt)[0]
    ended = SimpleNamespace(**{**vars(view), "live": False, "ended_at": now - 5, "state": None,
                               "exit_code": 0, "detail": "stopped (exit code 0)"})
    from specdeck_types.process import ProcState

    ended.state = ProcState.EXITED
    monkeypatch.setattr(overview_data, "regen_jobs", lambda rt_: [(job, ended)])
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    text = _text(at)
    assert "None running; the newest:" in text
    assert "rows/s" not in text and "ETA" not in text
    assert "stopped" in text.lower()



@pytest.mark.timeout(120)
def test_a_run_known_by_its_progress_log_shows_while_the_log_moves(overview, monkeypatch):
    """A run started from a terminal (no process here): listed as the Regeneration page lists it; running while
    its log moves, its cost N/A because it was not started here (no process record), with that reason on hover;
    once its log is old, not running."""
    rt, log, runs, now = overview
    monkeypatch.setattr(overview_data, "regen_jobs", REAL_REGEN_JOBS)  # the progress log under the outputs
    tiles, last = overview_data.regen_tiles(rt, now=now)
    assert [t.name for t in tiles] == ["regen-regen-a"] and last is None  # the name the Regeneration page gives it
    assert tiles[0].asked == 400 and tiles[0].to_ask == 1000 and tiles[0].rate == pytest.approx(50 / 60)
    assert tiles[0].eta is not None and tiles[0].eta.known
    costs = overview_data.regen_costs(rt, now=now)
    assert len(costs) == 1 and costs[0].gpu_hours is None and costs[0].short == "run not started here"
    text, why = overview_data.cost_parts(overview_data.cost_line("Regeneration", costs))
    assert text == "N/A (run not started here)" and "progress log" in why and "no process record" in why
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    row = _cost_rows(at)["Regeneration"]
    assert row.text == "N/A (run not started here)" and "followed from its progress log" in row.why
    tiles, last = overview_data.regen_tiles(rt, now=now + 3600)
    assert tiles == [] and last is not None and last.ended and last.state == "no news"
    assert last.rate is None and last.eta is None


@pytest.mark.timeout(120)
def test_the_cost_line_counts_the_servers_gpus_and_leaves_energy_unknown_without_readings(overview, monkeypatch):
    rt, log, runs, now = overview
    cfg = rt.fleet.config("sim").model_copy(update={"gpus": [0, 1]})
    real = rt.fleet.config
    monkeypatch.setattr(rt.fleet, "config", lambda name: cfg if name == "sim" else real(name))
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    row = _cost_rows(at)["Regeneration"]
    # the job ran 10 min on its server's two GPUs; the fake GPUs' power readings began with this runtime
    assert row.text == "0.33 GPU-h · energy N/A" and "<b>0.33</b>" in row.html
    assert "energy N/A: the GPU power readings cover only" in row.why


def _alert_lines(at: AppTest) -> list:
    return [m for m in at.markdown if m.value.startswith((":red[● error]", ":orange[▲ warning]", ":blue[○ info]"))]


@pytest.mark.timeout(120)
def test_alerts_errors_first_each_one_line_with_the_whole_text_on_hover(overview, monkeypatch):
    """Three alerts: all three, errors first, each on one line (cut at the tile's edge), the whole on hover."""
    rt, log, runs, now = overview
    long = "GPU 3 memory nearly full: " + "a very long explanation " * 6
    alerts = [SimpleNamespace(severity="info", title="an info"),
              SimpleNamespace(severity="warning", title=long, message="free memory or lower mem_fraction_static"),
              SimpleNamespace(severity="error", title="sim is down ([open](/servers?server=sim))")]
    monkeypatch.setattr(rt, "active_alerts", lambda: alerts)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    assert any(p.proto.label == "Alerts (3)" for p in at.get("page_link"))
    lines = _alert_lines(at)
    assert [m.value.split("]")[0] for m in lines] == [":red[● error", ":orange[▲ warning", ":blue[○ info"]
    assert lines[0].value.endswith("sim is down")  # the engine's own link dropped: the tile is the link
    assert all(m.proto.wrap is False for m in lines)  # one line each: the tile keeps its height
    assert "free memory" in lines[1].proto.help and long.strip() in lines[1].proto.help
    assert not any(p.proto.label.startswith("+") for p in at.get("page_link"))


@pytest.mark.timeout(120)
def test_more_alerts_than_fit_show_the_two_most_severe_and_a_link_to_the_rest(overview, monkeypatch):
    rt, log, runs, now = overview
    alerts = [SimpleNamespace(severity="info", title="an info"), SimpleNamespace(severity="warning", title="warn a"),
              SimpleNamespace(severity="error", title="err a"), SimpleNamespace(severity="warning", title="warn b"),
              SimpleNamespace(severity="error", title="err b")]
    monkeypatch.setattr(rt, "active_alerts", lambda: alerts)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    lines = _alert_lines(at)
    assert [m.value for m in lines] == [":red[● error] err a", ":red[● error] err b"]
    more = [p for p in at.get("page_link") if p.proto.label.startswith("+")]
    assert [p.proto.label for p in more] == ["+3 more (2 warnings, 1 info)"]
    assert more[0].proto.page == "processes"


def test_a_cost_line_says_what_is_known_and_why_the_rest_is_not():
    from backend.flows import cost as job_cost

    known = job_cost.Cost(0.5, 0.2, (0,), 1800.0, False, energy_why="GPU power readings")
    no_energy = job_cost.Cost(0.25, None, (1,), 900.0, False, energy_why="no GPU telemetry")
    followed = job_cost.unknown("started outside this workspace", job_cost.NOT_HERE)
    not_started = job_cost.unknown("not started yet", job_cost.NOT_STARTED)
    # some jobs counted: their sum, how many of all, why the others are not
    text, why = overview_data.cost_parts(overview_data.cost_line("Regeneration", [known, followed]))
    assert text == "**0.50** GPU-h · 0.20 kWh (1 of 2 jobs)" and why == "started outside this workspace"
    # every job counted, energy known for some only
    text, why = overview_data.cost_parts(overview_data.cost_line("Training", [known, no_energy]))
    assert text == "**0.75** GPU-h · 0.20 kWh (energy of 1 of 2)" and why == "energy N/A: no GPU telemetry"
    # none counted: N/A with the few words of each reason; no job at all: the words given for none
    text, why = overview_data.cost_parts(overview_data.cost_line("Training", [followed, not_started]))
    assert text == "N/A (run not started here, not started)" and "not started yet" in why
    assert overview_data.cost_parts(overview_data.cost_line("Benchmarks", [], none="no result yet")) == (
        "N/A (no result yet)", "")
    # the Training page's caption: N/A with the few words, the whole reason on hover
    assert overview_data.cost_text(not_started) == ("N/A (not started)", "not started yet")


@pytest.mark.timeout(120)
def test_the_pipeline_shows_each_stage_and_opens_its_page(overview):
    """Regenerate → train → deploy → benchmark, above the tiles: the running regeneration in green with its
    progress, the stages never run in grey; each stage a link to its page with its job, run or tab."""
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    pipe_block = next(node for key, _b, node in _blocks(at.main) if key == "ov-pipe")
    links = [leaf.proto for leaf in _leaves(pipe_block) if type(leaf.proto).__name__ == "PageLink"]
    assert [p.label for p in links] == ["1 · Regenerate", "2 · Train", "3 · Deploy", "4 · Benchmark"]
    assert [p.page for p in links] == ["regeneration", "training", "training", "benchmarks"]
    assert "job=regen-a" in links[0].query_string and "tab=Deploy" in links[2].query_string
    bodies = [str(leaf.proto.body) for leaf in _leaves(pipe_block) if type(leaf.proto).__name__ == "Html"
              and "ov-stage" in str(leaf.proto.body)]
    assert len(bodies) == 4
    assert "● RUNNING 40%" in bodies[0] and "ov-stage-running" in bodies[0] and "ETA " in bodies[0]
    for body, figure in zip(bodies[1:], ("no run in the workspace", "no deploy yet", "no result yet")):
        assert "○ NOT RUN" in body and figure in body
    # the pipeline comes first, before the tiles
    keys = [key for key, _b, _n in _blocks(at.main)]
    assert keys.index("ov-pipe") < keys.index("ov-regen")
