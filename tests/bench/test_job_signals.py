"""A job's SIGTERM handler must survive a second SIGTERM that lands while it runs.

The supervisor signals a job's process group and then the process itself, so two SIGTERMs can arrive
back to back.  Python runs a handler again inside the one already running; a handler that calls
``threading.Event.set()`` then waits forever for the lock the outer ``set()`` holds, and the job sits
until SIGKILL with its progress file still saying 'running' (seen in the Benchmarks page's stop test).
The child below makes the second signal land exactly there: its event sends SIGTERM to its own process
while it holds the event's lock.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, signal, sys, threading, time
sys.path.insert(0, sys.argv[1])
from backend.flows.bench_job import stop_on_sigterm

class SignalInsideSet(threading.Event):
    def set(self):
        with self._cond:
            if not self._flag:
                os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's second SIGTERM, right now
                for _ in range(1000):  # bytecode: where Python runs pending handlers
                    pass
            self._flag = True
            self._cond.notify_all()

stop = SignalInsideSet()
stop_on_sigterm(stop)
os.kill(os.getpid(), signal.SIGTERM)
deadline = time.monotonic() + 5
while not stop.is_set() and time.monotonic() < deadline:
    time.sleep(0.01)
print("stopped" if stop.is_set() else "not stopped", flush=True)
"""


def test_a_second_sigterm_inside_the_handler_does_not_hang_the_job():
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, str(REPO)], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("the job hung in its SIGTERM handler (a second SIGTERM inside Event.set)") from exc
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "stopped"


def test_a_second_ctrl_c_interrupts_as_usual():
    child = r"""
import os, signal, sys, threading
sys.path.insert(0, sys.argv[1])
from backend.flows.bench_job import stop_on_sigterm
stop = threading.Event()
stop_on_sigterm(stop)
os.kill(os.getpid(), signal.SIGINT)
assert stop.is_set()
try:
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):
        pass
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""
    r = subprocess.run([sys.executable, "-c", child, str(REPO)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "interrupted"
