from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from backend.supervisor.osproc import Ident, OsKiller
from backend.supervisor.starts import WALL_CLOCK_FLOOR, start_of


@contextlib.contextmanager
def _sleeper():
    """A sleeping child leading its own session, ended (if still there) on the way out."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=10)


def test_is_alive_needs_pid_and_create_time():
    k = OsKiller()
    me = os.getpid()
    assert k.is_alive(me, start_of(me))
    assert not k.is_alive(me, start_of(me) - 100)  # same pid, other process
    assert not k.is_alive(me, None)  # identity unknown: never ours


def test_a_start_is_seconds_since_boot_and_an_older_wall_clock_identity_still_matches():
    k = OsKiller()
    me = os.getpid()
    start = start_of(me)
    assert 0 <= start < WALL_CLOCK_FLOOR and start <= time.monotonic() + 1
    # identity files written by earlier versions hold psutil's wall-clock create time
    wall = psutil.Process(me).create_time()
    assert k.is_alive(me, wall) and not k.is_alive(me, wall - 100)
    assert [t.pid for t in k.collect(Ident(me, wall))][:1] == [me]


@pytest.mark.timeout(60)
def test_a_step_of_the_wall_clock_does_not_make_a_child_a_stranger(monkeypatch):
    # Linux gives the boot time in whole seconds of the wall clock; after a clock step every
    # psutil create time moves by a second or more. A start since boot does not move.
    with _sleeper() as p:
        start = start_of(p.pid)
        real_boot = psutil.boot_time()
        monkeypatch.setattr(psutil, "boot_time", lambda: real_boot + 1.0)
        monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real_boot + 1.0)
        assert abs(psutil.Process(p.pid).create_time() - (start + real_boot + 1.0)) < 0.05
        k = OsKiller()
        assert k.is_alive(p.pid, start)
        assert [t.pid for t in k.collect(Ident(p.pid, start))] == [p.pid]
        assert k.signal([Ident(p.pid, start)], signal.SIGTERM, pgid=p.pid) == 1
        assert p.wait(timeout=10) == -signal.SIGTERM


@pytest.mark.timeout(60)
def test_zombie_and_ended_processes_are_not_alive():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    ct = start_of(p.pid)
    deadline = time.monotonic() + 10
    while psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.02)
    k = OsKiller()
    assert not k.is_alive(p.pid, ct)  # exited, not yet reaped
    p.wait()
    assert not k.is_alive(p.pid, ct)


@pytest.mark.timeout(60)
def test_signal_skips_a_target_whose_create_time_does_not_match():
    with _sleeper() as p:
        ct = start_of(p.pid)
        k = OsKiller()
        assert k.signal([Ident(p.pid, ct - 50)], signal.SIGTERM, pgid=p.pid) == 0
        time.sleep(0.2)
        assert p.poll() is None
        assert [t.pid for t in k.collect(Ident(p.pid, ct))] == [p.pid]
        assert k.signal([Ident(p.pid, ct)], signal.SIGTERM, pgid=p.pid) == 1
        assert p.wait(timeout=10) == -signal.SIGTERM


@pytest.mark.timeout(60)
def test_collect_does_not_scan_the_group_of_a_root_that_is_not_ours():
    # A process leading its own group, whose pid matches a record of a process long gone.
    with _sleeper() as p:
        ct = start_of(p.pid)
        k = OsKiller()
        assert k.collect(Ident(p.pid, ct - 5000.0)) == []
        assert k.signal(k.collect(Ident(p.pid, ct - 5000.0)), signal.SIGKILL, pgid=p.pid) == 0
        time.sleep(0.2)
        assert p.poll() is None
