"""The Overview's training figures (no Streamlit here): the current or latest run's step, loss and predicted
accept length, as the Training page's key figures give them.

The run's log is read by the Training page's own shared follower (``ui.train.data.follower``), which reads
only what was appended since its last poll (at most ``POLL_BYTES`` a poll, so a long log is caught up over
several refreshes, said as "reading the log").  The figures come from the newest records only (the last
``TAIL_RECORDS`` of the newest run appended to the log), never from a pass over the whole log: the loss is
the latest logged one, the predicted accept length ``1 + a0 + a0·a1 + …`` over ``acc_i`` (greedy serving)
of the latest logged step, capped at the deploy flow's default draft steps, as the Training page shows
them by default.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.flows.deploy import DEFAULT_STEPS
from ui import fmt
from ui.train.data import follower, predicted

TAIL_RECORDS = 600  # the newest records looked at: a Gen-1/2 step's positions are a few lines each


@dataclass(frozen=True)
class TrainFigures:
    name: str
    badge: fmt.Badge
    live: bool
    started: bool  # the run has a log (it ran here, or it was started elsewhere and writes there)
    step: int | None
    total_steps: int | None
    loss: float | None
    loss_step: int | None  # the step the loss was logged at
    predicted: float | None  # predicted accept length of the latest logged step
    predicted_step: int | None
    ended: str | None  # how the run ended, as the log says (the supervisor's end line)
    reading: float | None = None  # share of the log read so far, while a first read catches up
    why: str = ""  # why a figure is N/A

    @property
    def fraction(self) -> float | None:
        if self.step is None or not self.total_steps:
            return None
        return min(1.0, self.step / self.total_steps)


def focus_run(rt) -> str | None:
    """The run the Overview shows: the first running one, else the one whose log was written last, else the
    first of the workspace's runs."""
    names = list(rt.train.names())
    live = [n for n in names if (v := rt.supervisor.view(n)) is not None and v.live]
    if live:
        return live[0]
    written: list[tuple[float, int, str]] = []
    for i, n in enumerate(names):
        try:
            written.append((rt.train.log_path(n).stat().st_mtime, -i, n))
        except OSError:
            continue
    if written:
        return max(written)[2]
    return names[0] if names else None


def _tail(records) -> list:
    """The newest ``TAIL_RECORDS`` records, from the newest run's start line when it is among them."""
    tail = list(records[-TAIL_RECORDS:])
    for i in range(len(tail) - 1, -1, -1):
        if tail[i].kind == "run_start":
            return tail[i:]
    return tail


def train_figures(rt, name: str) -> TrainFigures:
    """Run ``name``'s figures from its log, read by the Training page's shared follower."""
    view = rt.supervisor.view(name)
    badge = fmt.view_badge(view)
    live = view is not None and view.live
    log = rt.train.log_path(name)
    snap = follower(log, rt.train.output_dir(name)).poll()
    if not snap.exists:
        return TrainFigures(name, badge, live, False, None, None, None, None, None, None, None,
                            why="no log yet: the run writes it when it starts")
    tail = _tail(snap.records)
    loss, loss_step = None, None
    for r in reversed(tail):
        if r.kind == "metrics" and r.split != "eval" and r.metrics.get("loss") is not None:
            loss, loss_step = float(r.metrics["loss"]), r.step
            break
    view_pred = predicted(tail, snap.generation, temperature=0.0, num_steps=DEFAULT_STEPS)
    latest = view_pred.latest
    p = snap.progress
    why = "" if (loss is not None and latest is not None) else (
        "the log has no training line yet" if p.step is None and loss is None
        else f"the log has no {'loss' if loss is None else view_pred.metric + '_0'} yet")
    return TrainFigures(name, badge, live, True, p.step, p.total_steps, loss, loss_step,
                        latest.accept_length if latest else None, latest.step if latest else None, p.ended,
                        reading=snap.offset / snap.size if snap.catching_up and snap.size else None, why=why)


def figures_text(f: TrainFigures) -> tuple[str, str]:
    """(``step 120 / 200 · loss 1.234``, ``predicted accept length 2.30``) with N/A where a figure is not known."""
    step = fmt.NA if f.step is None else fmt.count(f.step) + (f" / {fmt.count(f.total_steps)}" if f.total_steps
                                                               else "")
    loss = fmt.NA if f.loss is None else f"{f.loss:.3f}"
    return f"step {step} · loss {loss}", f"predicted accept length {fmt.accept_len(f.predicted)}"
