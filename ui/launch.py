"""Start the dashboard: ``python -m ui.launch [streamlit run options]`` (what ``scripts/dashboard`` runs).

Streamlit runs ``app.py`` only when a browser opens a session, so a fresh dashboard did its start-up work
while its first visitor waited: importing the pages' modules (plotly, pandas and the ``ui`` package, about
2-4 s of CPU on a 2-core machine), opening the workspace, reading the training log the first page shows (a
100,000-step log is 16 MB) and building its charts.  This launcher starts Streamlit as ``streamlit run
app.py`` does and, in a thread beside it, does that work as soon as the server listens (:func:`warm`): the
first page finds it done or under way.  It is the same work the first page would do, in the same process and
through the same shared objects (the process-wide runtime, the Training page's shared log followers and chart
cache), done before anyone asks; nothing more is read than the first page reads.  A failure there is logged
and left to the page, which shows it as before.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("specdeck.launch")

APP = Path(__file__).resolve().parent.parent / "app.py"
READ_WAIT_S = 0.2  # how often the start-up work looks whether the log is read
SERVING_WAIT_S = 0.05  # how often it looks whether the server listens, before it begins
SERVING_TIMEOUT_S = 120.0


@dataclass
class Warmed:
    """What :func:`warm` did, for the log line and the tests."""

    modules: int = 0
    workspace: str | None = None
    logs: list[str] = field(default_factory=list)  # training logs whose reading was started
    prepared: list[str] = field(default_factory=list)  # runs whose first view's charts were built
    error: str | None = None
    seconds: float = 0.0


def _import_ui() -> int:
    """Import every module of the ``ui`` package (what the pages import); the count."""
    import ui

    n = 0
    for mod in pkgutil.walk_packages(ui.__path__, "ui."):
        if mod.name == "ui.launch":  # this module (run as __main__, it would be imported a second time)
            continue
        importlib.import_module(mod.name)
        n += 1
    return n


def warm() -> Warmed:
    """Import the pages' modules, open the workspace (``backend.runtime.get_runtime``: the demo workspace
    when none is configured, as the first page would), read the log of the training run the Overview and the
    Training page open first (its shared follower reads it in its own thread) and, once it is read, build
    that run's charts as the Training page first draws them (``ui.train.curves.prepare``)."""
    t0 = time.monotonic()
    out = Warmed()
    try:
        out.modules = _import_ui()
        from backend.runtime import get_runtime
        from ui.overview_train import focus_run
        from ui.train.data import follower

        rt = get_runtime()
        out.workspace = str(rt.workspace.root)
        name = focus_run(rt)
        if name is not None:
            path = rt.train.log_path(name)
            if path.is_file():
                f = follower(path, rt.train.output_dir(name))
                f.poll()
                out.logs.append(str(path))
                while f.poll().catching_up:  # read by the follower's own thread; a page may show it meanwhile
                    time.sleep(READ_WAIT_S)
                from ui.train.curves import prepare
                from ui.train.runs import workspace_run

                prepare(rt, workspace_run(rt, name))
                out.prepared.append(name)
    except Exception as exc:  # the first page meets the same problem and shows it
        out.error = f"{type(exc).__name__}: {exc}"
    out.seconds = time.monotonic() - t0
    return out


def _when_serving(timeout_s: float = SERVING_TIMEOUT_S) -> bool:
    """Wait until Streamlit's server listens (its runtime starts once the socket is bound): the start-up work
    begins then, so that it never slows the server's own start and bind.  False after ``timeout_s``."""
    from streamlit.runtime import Runtime, RuntimeState

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if Runtime.exists() and Runtime.instance().state != RuntimeState.INITIAL:
            return True
        time.sleep(SERVING_WAIT_S)
    return False


def _warm_and_log() -> None:
    if not _when_serving():
        log.warning("specdeck: the server did not start within %.0f s; the first page does the start-up work",
                    SERVING_TIMEOUT_S)
        return
    w = warm()
    if w.error:
        log.warning("specdeck: start-up work stopped (%s); the first page does it", w.error)
    else:
        log.info("specdeck: %d modules imported, workspace %s open, %s in %.1f s", w.modules, w.workspace,
                 f"{', '.join(w.logs)} read and its charts built" if w.prepared else "no training log to read",
                 w.seconds)


def main(argv: list[str] | None = None) -> None:
    """``streamlit run app.py ARGV`` with :func:`warm` in a thread beside it."""
    from ui.context import limit_malloc_arenas, serve_static_files_whole

    limit_malloc_arenas()  # before any thread starts (ui.context says why); app.py's own call is then a no-op
    serve_static_files_whole()
    if not log.handlers:  # its own line on stderr; the root logger (libraries' INFO lines) stays as it is
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    threading.Thread(target=_warm_and_log, name="specdeck-warm", daemon=True).start()
    from streamlit.web import cli

    # the app's static folder serves the charts' code (ui/linechart.py); a user's own setting comes after
    cli.main(args=["run", str(APP), "--server.enableStaticServing", "true",
                   *(sys.argv[1:] if argv is None else argv)], prog_name="streamlit")


if __name__ == "__main__":
    main()
