"""The Overview's pipeline, regenerate → train → deploy → benchmark, as four connected stages: where each
stands (running with its progress, done, failed, stopped, or not run yet), its one-line figure, and the page
(with the run, job or tab in its query) it opens.  The stages' states are read from what each page reads:
the regeneration jobs' progress logs, the training run's log and process, the deploy jobs' state files,
the benchmark jobs' progress files and the stored results.  Nothing here calls Streamlit; :func:`stage_html`
gives a stage's body as HTML, in the status colours every page uses (a word and an icon beside each colour).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ui import fmt

REGEN_PAGE, TRAIN_PAGE, BENCH_PAGE = "app_pages/regeneration.py", "app_pages/training.py", "app_pages/benchmarks.py"

# UX.md's status palette: RUNNING green, STARTING/STOPPING/paused amber, done and stopped grey, failed red,
# unknown purple; a stage never run is grey with an open circle.  Text colours that read on light and dark.
TONE_TEXT = {"green": "#16a34a", "orange": "#d97706", "gray": "#808495", "red": "#e0383e", "violet": "#9333ea"}
TONE_FILL = {"green": "rgba(34,197,94,0.13)", "orange": "rgba(245,158,11,0.15)", "gray": "rgba(128,128,128,0.10)",
             "red": "rgba(239,68,68,0.14)", "violet": "rgba(168,85,247,0.13)"}
LEVEL_TONE = {"good": "green", "par": "gray", "warn": "orange", "bad": "red"}  # a benchmark verdict's colour


@dataclass(frozen=True)
class Stage:
    key: str  # regen | train | deploy | bench
    title: str
    tone: str  # a TONE_TEXT key
    icon: str
    word: str  # the state in a word or two: RUNNING 43%, DONE, FAILED, NOT RUN
    figure: str  # its one-line figure
    hover: str  # the stage's whole story, on hover
    page: str
    query: dict[str, str] = field(default_factory=dict)
    fraction: float | None = None  # progress of a running stage
    figure_tone: str | None = None  # a figure coloured on its own (a benchmark's verdict)

    @property
    def state(self) -> str:
        """The state as a class name: running, done, failed, stopped, idle, waiting, unknown."""
        return {"●": "running", "✓": "done", "✕": "failed", "■": "stopped", "○": "idle", "◐": "waiting"}.get(
            self.icon, "unknown")


def _pct(fraction: float | None) -> str:
    return "" if fraction is None else " " + fmt.pct(fraction * 100)


# -- regeneration ----------------------------------------------------------------------------------------


REGEN_WORDS = {"running": ("green", "●", "RUNNING"), "starting": ("orange", "◐", "STARTING"),
               "waiting": ("orange", "◐", "WAITING"), "pausing": ("orange", "◐", "PAUSING"),
               "paused": ("orange", "◐", "PAUSED"), "stopping": ("orange", "◐", "STOPPING"),
               "done": ("gray", "✓", "DONE"), "failed": ("red", "✕", "FAILED"), "stopped": ("gray", "■", "STOPPED"),
               "no news": ("orange", "◐", "NO NEWS")}


def regen_stage(tiles: list, last: Any) -> Stage:
    """From ``overview_data.regen_tiles``: the first running job, else the newest ended one."""
    t = tiles[0] if tiles else last
    if t is None:
        return Stage("regen", "Regenerate", "gray", "○", "NOT RUN", "no run yet",
                     "No regeneration in this workspace yet: start one on the Regeneration page.", REGEN_PAGE)
    state = t.state.lower()
    if state not in REGEN_WORDS and state.startswith(("exited", "fatal")):
        state = "failed"
    elif state not in REGEN_WORDS and state.startswith(("finished", "stopped")):
        state = "done" if state.startswith("finished") else "stopped"
    tone, icon, word = REGEN_WORDS.get(state, ("violet", "?", state.upper()))
    rows = (f"{fmt.count(t.asked)} / {fmt.count(t.to_ask)} rows" if t.asked is not None and t.to_ask is not None
            else "rows N/A")
    more = f" (and {len(tiles) - 1} more running)" if len(tiles) > 1 else ""
    if not t.ended:
        band = t.eta.range_text() if t.eta is not None and t.eta.known else None
        figure = f"ETA {band}" if band else rows
        hover = (f"{t.name}: {rows}" + (f", {fmt.count(t.failed)} failed" if t.failed else "")
                 + (f"; ETA {band} (point {fmt.duration(t.eta.point_s)})" if band else "; ETA N/A")
                 + (f"; {t.rate:,.2f} rows/s" if t.rate is not None else "") + more)
        return Stage("regen", "Regenerate", tone, icon, word + _pct(t.fraction), figure, hover, REGEN_PAGE,
                     {"job": t.name}, t.fraction)
    figure = rows + (f" · {fmt.count(t.failed)} failed" if t.failed else "")
    return Stage("regen", "Regenerate", tone, icon, word, figure, f"{t.name} (the newest run): {state}; {figure}",
                 REGEN_PAGE, {"job": t.name})


# -- training ----------------------------------------------------------------------------------------------


def train_stage(figs: Any) -> Stage:
    """From ``overview_train.train_figures`` of the run the Overview shows (None: no run in the workspace)."""
    if figs is None:
        return Stage("train", "Train", "gray", "○", "NOT RUN", "no run in the workspace",
                     "No training run in this workspace: add one on the Training page.", TRAIN_PAGE)
    from ui.overview_train import figures_text

    query = {"run": figs.name}
    steps, pred = figures_text(figs)
    b = figs.badge
    if figs.live:
        word = ("RUNNING" if b.label == "RUNNING" else b.label) + _pct(figs.fraction)
        figure = f"loss {figs.loss:.3f}" if figs.loss is not None else steps.split(" · ")[0]
        return Stage("train", "Train", b.colour, b.icon, word, figure, f"{figs.name}: {steps} · {pred}",
                     TRAIN_PAGE, query, figs.fraction)
    if not figs.started and b.label == "NOT STARTED":
        return Stage("train", "Train", "gray", "○", "NOT RUN", "not started",
                     f"{figs.name}: not started yet ({figs.why}). Start it on the Training page.", TRAIN_PAGE, query)
    ended = (figs.ended or "").lower()
    if b.colour == "red" or "fail" in ended or "error" in ended:
        tone, icon, word = "red", "✕", "FAILED"
    elif b.label == "STOPPED" or "stop" in ended:
        tone, icon, word = "gray", "■", "STOPPED"
    elif b.label.startswith("FINISHED") or figs.ended is not None or (figs.fraction or 0) >= 1:
        tone, icon, word = "gray", "✓", "DONE"
    else:  # a log written elsewhere, no process here and no end line: where it stands is not known
        tone, icon, word = "violet", "?", "NO PROCESS"
    figure = (f"accept {fmt.accept_len(figs.predicted)} (pred.)" if figs.predicted is not None
              else steps.split(" · ")[0])
    return Stage("train", "Train", tone, icon, word, figure,
                 f"{figs.name}: {b.icon} {b.label}" + (f" ({figs.ended})" if figs.ended else "") + f"; {steps} · {pred}",
                 TRAIN_PAGE, query)


# -- deploy ------------------------------------------------------------------------------------------------


def deploy_stage(rt, train_names: list[str]) -> Stage:
    """The newest deploy job's state file (``backend.flows.deploy``), its process beside it."""
    from backend.flows.deploy import DONE, FAILED, RUNNING, SKIPPED, STOPPED, read_state
    from backend.flows.deploy_job import deploy_jobs

    jobs = deploy_jobs(rt)
    base = {"tab": "Deploy"}
    if not jobs:
        return Stage("deploy", "Deploy", "gray", "○", "NOT RUN", "no deploy yet",
                     "No checkpoint deployed yet: deploy one from the Training page's Deploy tab.", TRAIN_PAGE, base)
    job = jobs[0]
    state = read_state(job.meta["state"])
    view = rt.supervisor.view(job.name)
    run = (state.request.get("run_name") if state is not None else None)
    query = {**({"run": run} if run in train_names else {}), **base}
    server = job.meta.get("server") or "?"
    if state is None:
        if view is not None and view.live:
            return Stage("deploy", "Deploy", "green", "●", "RUNNING", f"to {server}",
                         f"{job.name}: starting, no state written yet", TRAIN_PAGE, query)
        return Stage("deploy", "Deploy", "violet", "?", "UNKNOWN", f"to {server}",
                     f"{job.name}: its state file is missing or unreadable", TRAIN_PAGE, query)
    label = state.label or server
    if state.state == RUNNING and view is not None and not view.live:
        b = fmt.view_badge(view)
        return Stage("deploy", "Deploy", "red", "✕", "FAILED", f"process {b.label.lower()}",
                     f"{job.name}: its process ended ({b.label}) without writing a final state", TRAIN_PAGE, query)
    if state.state == RUNNING:
        counted = [s for s in state.steps if s.status != SKIPPED]
        done = sum(s.status == DONE for s in counted)
        frac = done / len(counted) if counted else None
        cur = state.current
        figure = cur.name if cur is not None else "…"
        if cur is not None and cur.name == "benchmark" and state.total:
            figure += f" {fmt.count(state.done)}/{fmt.count(state.total)}"
        return Stage("deploy", "Deploy", "green", "●", "RUNNING" + _pct(frac), figure,
                     f"{job.name}: {label} to {server}; now: " + (cur.title if cur else "between steps")
                     + (f" ({state.detail})" if state.detail else ""), TRAIN_PAGE, query, frac)
    if state.state == DONE:
        return Stage("deploy", "Deploy", "gray", "✓", "DONE", f"on {server}",
                     f"{job.name}: {label} deployed to {server}; server left: {state.restore or state.server_left}",
                     TRAIN_PAGE, query)
    if state.state == STOPPED:
        return Stage("deploy", "Deploy", "gray", "■", "STOPPED", f"on {server}",
                     f"{job.name}: stopped; {state.restore}", TRAIN_PAGE, query)
    word = "FAILED" if state.state == FAILED else state.state.upper()
    return Stage("deploy", "Deploy", "red", "✕", word, f"at {state.failed_step or '?'}",
                 f"{job.name}: failed at {state.failed_step or '?'}: {state.error or ''}; {state.restore}",
                 TRAIN_PAGE, query)


# -- benchmarks --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NewestVerdict:
    results: int  # valid results stored
    newest: Any  # the newest speculative result (None: none)
    verdict: Any  # its ui.bench.charts Verdict (None: none)


def newest_verdict(rt, results: list) -> NewestVerdict:
    """The newest speculative result and its verdict against its baseline at the same load, as the
    Benchmarks page's Runs table gives it."""
    from ui.bench import charts as bench_charts
    from ui.bench import data as bench_data

    results = [r for r in results if not r.invalid]
    spec = [r for r in results if not r.is_baseline]
    newest = max(spec, key=lambda r: (bench_data.when(r) or 0.0, r.id or 0), default=None)
    if newest is None:
        return NewestVerdict(len(results), None, None)
    configured = {n: (rt.fleet.config(n).model_path, rt.fleet.config(n).served_model_name,
                      rt.fleet.config(n).baseline_tok_s) for n in rt.fleet.names()}
    verdicts = bench_charts.verdicts(bench_charts.speedups(results, configured))
    return NewestVerdict(len(results), newest, verdicts.get(newest.id))


def running_bench(rt) -> tuple[Any, Any] | None:
    """(job, progress) of a benchmark job that runs now, the newest; None when none does."""
    from backend.flows.bench_job import RUNNING, read_progress
    from ui.bench.run import bench_jobs, ended_without_final

    for job in reversed(bench_jobs(rt)):
        prog = read_progress(job.progress)
        if prog is None or prog.state != RUNNING:
            continue
        view = rt.supervisor.view(job.name) if job.started_here else None
        if ended_without_final(prog, view) is None:
            return job, prog
    return None


def bench_stage(running: tuple[Any, Any] | None, nv: NewestVerdict) -> Stage:
    from ui.bench import data as bench_data

    if running is not None:
        job, prog = running
        return Stage("bench", "Benchmark", "green", "●", "RUNNING" + _pct(prog.fraction),
                     f"{prog.server} · {fmt.count(prog.done)}/{fmt.count(prog.total)} req",
                     f"{job.name} on {prog.server}: {prog.phase}, load {prog.step + 1} of {max(1, len(prog.loads))}, "
                     f"{fmt.count(prog.done)} of {fmt.count(prog.total)} requests", BENCH_PAGE,
                     {"tab": "Run a benchmark"}, prog.fraction)
    if nv.newest is None:
        what = (f"{fmt.count(nv.results)} results, all without speculation" if nv.results else "no result yet")
        return Stage("bench", "Benchmark", "gray", "○", "NOT RUN", what,
                     f"No speculative benchmark yet ({what}): run one on the Benchmarks page.", BENCH_PAGE)
    v = nv.verdict
    ratio = f"{v.ratio:.2f}× " if v is not None and getattr(v, "ratio", None) is not None else ""
    word = v.word if v is not None else f"no verdict ({fmt.NA})"
    r = nv.newest
    return Stage("bench", "Benchmark", "gray", "✓", "DONE", ratio + word,
                 f"Newest #{r.id} {bench_data.server_of(r)} · {bench_data.load_short(r)}: {ratio}{word} (against the "
                 "baseline of the same server at the same load)", BENCH_PAGE, {},
                 figure_tone=LEVEL_TONE.get(v.level) if v is not None else None)


# -- drawing -----------------------------------------------------------------------------------------------


def stage_html(s: Stage) -> str:
    """A stage's state (icon and word in its colour, a thin bar under a running stage) and its figure, each on
    one line (cut with an ellipsis, the whole on hover)."""
    colour = TONE_TEXT.get(s.tone, TONE_TEXT["gray"])
    bar = ""
    if s.fraction is not None:
        width = max(0.0, min(1.0, s.fraction)) * 100
        bar = f'<div class="ov-stage-bar"><span style="width:{width:.0f}%;background:{colour}"></span></div>'
    fig_colour = f' style="color:{TONE_TEXT[s.figure_tone]}"' if s.figure_tone in TONE_TEXT else ""
    return (f'<div class="ov-stage ov-stage-{s.state}" title="{html.escape(s.hover)}">'
            f'<div class="ov-stage-state" style="color:{colour}">{html.escape(s.icon)} {html.escape(s.word)}</div>'
            f'{bar}<div class="ov-stage-fig"{fig_colour}>{html.escape(s.figure)}</div></div>')


def fill(s: Stage) -> str:
    """The stage box's background: its state's colour, faint."""
    return TONE_FILL.get(s.tone, TONE_FILL["gray"])
