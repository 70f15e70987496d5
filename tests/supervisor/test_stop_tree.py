"""Stop ends the whole tree, including what the process starts during its grace period."""

from __future__ import annotations

import pytest

from specdeck_types.process import ProcState as S
from tests.helpers import printed
from tests.supervisor.conftest import gone, wait_for

# On SIGTERM the root does not end: it starts a child in a session of its own (so neither the
# root's process group nor the first scan of its tree holds it), which ignores SIGTERM too.
LATE_SPAWNER = r"""
import os, signal, subprocess, sys, time
def on_term(*_):
    p = subprocess.Popen([sys.executable, "-c",
                          "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"],
                         start_new_session=True)
    with open("late.pid.tmp", "w") as f:
        f.write(str(p.pid))
    os.replace("late.pid.tmp", "late.pid")
signal.signal(signal.SIGTERM, on_term)
print("tree up", flush=True)
while True:
    time.sleep(1)
"""


@pytest.mark.timeout(90)
def test_child_started_during_the_grace_period_is_killed_too(real):
    sup = real.supervisor()
    sup.sync_specs([real.spec("tree", LATE_SPAWNER, stop_grace_s=3.0)])
    sup.start("tree")
    # the handler is in place once the child has printed (the header quotes the code: not that)
    wait_for(lambda: printed(real.logs / "tree.log", "tree up"), poll=sup.poll, timeout_s=30)
    root = wait_for(lambda: sup.view("tree").pid, poll=sup.poll)
    v = sup.stop("tree", wait=True)
    late_file = real.root / "late.pid"
    log = open(real.logs / "tree.log").read()
    assert late_file.exists(), f"the root never got SIGTERM: {v.state} {v.detail!r}; log:\n{log}"
    late = int(late_file.read_text())
    real.extra_pids.append((late, None))  # ended at teardown if the stop missed it
    assert v.state == S.EXITED and gone(root)
    # SIGKILL went to a fresh scan of the tree, which found the late child.
    wait_for(lambda: gone(late), timeout_s=10)
