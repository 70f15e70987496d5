from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from backend.supervisor.osproc import Ident, OsKiller


def test_is_alive_needs_pid_and_create_time():
    k = OsKiller()
    me = psutil.Process(os.getpid())
    assert k.is_alive(me.pid, me.create_time())
    assert not k.is_alive(me.pid, me.create_time() - 100)  # same pid, other process
    assert not k.is_alive(me.pid, None)  # identity unknown: never ours


@pytest.mark.timeout(60)
def test_zombie_and_ended_processes_are_not_alive():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    ct = psutil.Process(p.pid).create_time()
    deadline = time.monotonic() + 10
    while psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.02)
    k = OsKiller()
    assert not k.is_alive(p.pid, ct)  # exited, not yet reaped
    p.wait()
    assert not k.is_alive(p.pid, ct)


@pytest.mark.timeout(60)
def test_signal_skips_a_target_whose_create_time_does_not_match():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        ct = psutil.Process(p.pid).create_time()
        k = OsKiller()
        assert k.signal([Ident(p.pid, ct - 50)], signal.SIGTERM, pgid=p.pid) == 0
        time.sleep(0.2)
        assert p.poll() is None
        assert [t.pid for t in k.collect(Ident(p.pid, ct))] == [p.pid]
        assert k.signal([Ident(p.pid, ct)], signal.SIGTERM, pgid=p.pid) == 1
        assert p.wait(timeout=10) == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=10)


@pytest.mark.timeout(60)
def test_collect_does_not_scan_the_group_of_a_root_that_is_not_ours():
    # A process leading its own group, whose pid matches a record of a process long gone.
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        ct = psutil.Process(p.pid).create_time()
        k = OsKiller()
        assert k.collect(Ident(p.pid, ct - 5000.0)) == []
        assert k.signal(k.collect(Ident(p.pid, ct - 5000.0)), signal.SIGKILL, pgid=p.pid) == 0
        time.sleep(0.2)
        assert p.poll() is None
    finally:
        p.terminate()
        p.wait(timeout=10)
