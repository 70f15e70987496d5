"""Keep what a training log's reader has read out of the garbage collector's full collections.

A long log is read into some hundred thousand records and curves that stay for the life of the process, and
the dashboard's server runs a full collection after every script or fragment run (Streamlit's
``runner.postScriptGC``): at 100,000 steps that walk took a third of a second each time, about a fifth of a
core with one tab open on the Training page and nothing appended.  :func:`pin` moves every object alive now
into the collector's permanent generation (``gc.freeze``, constant time), which later collections skip;
objects that die are still freed by their reference counts.  Only a cycle among pinned objects that later
becomes garbage waits: the first pin :data:`CLEAN_S` or more after the last collection first takes everything
back (``gc.unfreeze``) and collects once.  The readers pin when they read records or build from them.
"""

from __future__ import annotations

import gc
import threading
import time

CLEAN_S = 300.0  # the longest that pinned garbage waits for a collection

_lock = threading.Lock()
_last_clean: float | None = None
_enabled = False


def enable() -> None:
    """Pins take effect from now on in this process: the dashboard's server calls it once it runs for real
    (``ui.context.freeze_startup``).  Elsewhere (a test process running pages under AppTest, a script) a pin
    does nothing: freezing would keep every test's garbage cycles alive with the page's."""
    global _enabled
    _enabled = True


def pin(*, now: float | None = None) -> bool:
    """Pin every object alive now; every :data:`CLEAN_S`, first unpin and collect.  Whether it collected.
    Nothing before :func:`enable`."""
    global _last_clean
    if not _enabled:
        return False
    t = time.monotonic() if now is None else now
    with _lock:
        clean = _last_clean is None or t - _last_clean >= CLEAN_S
        if clean:
            gc.unfreeze()
            gc.collect()
            _last_clean = t
        gc.freeze()
    return clean
