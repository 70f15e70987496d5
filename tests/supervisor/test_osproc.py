from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from backend.supervisor.osproc import Ident, OsKiller
from backend.supervisor import starts
from backend.supervisor.starts import start_of


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


def _ticks(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat, read by hand: the start, in clock ticks since boot."""
    data = open(f"/proc/{pid}/stat", "rb").read()
    return int(data[data.rfind(b")") + 2:].split()[19])


def test_a_start_is_the_start_ticks_from_this_boots_reference_and_a_psutil_identity_still_matches(monkeypatch):
    k = OsKiller()
    me = os.getpid()
    start = start_of(me)
    assert abs(start - (starts.boot_reference() + _ticks(me) / os.sysconf("SC_CLK_TCK"))) < 1e-6
    assert starts.boot_reference() <= start <= time.time() + 1
    # identities recorded earlier as psutil create times match while the clock has not been stepped
    # since this boot's reference was taken (always so on a fresh machine; here, as if so)
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: starts.boot_reference())
    wall = psutil.Process(me).create_time()
    assert k.is_alive(me, wall) and not k.is_alive(me, wall - 100)
    assert [t.pid for t in k.collect(Ident(me, wall))][:1] == [me]


def _fresh_reference(monkeypatch, folder, boot_id="boot-a"):
    monkeypatch.setattr(starts, "_ref", None)
    monkeypatch.setattr(starts, "_REF_DIRS", (str(folder),))
    monkeypatch.setattr(starts, "_boot_id", lambda: boot_id)


def test_every_process_of_a_boot_counts_from_the_reference_the_first_one_recorded(tmp_path, monkeypatch):
    _fresh_reference(monkeypatch, tmp_path)
    monkeypatch.setattr(psutil, "boot_time", lambda: 1_700_000_000.0)
    assert starts.boot_reference() == 1_700_000_000.0
    (ref_file,) = tmp_path.iterdir()
    assert ref_file.name == f"specdeck-boot-{os.geteuid()}-boot-a"
    # later (the clock stepped: the boot time now reads a second more), another process of this boot
    _fresh_reference(monkeypatch, tmp_path)
    monkeypatch.setattr(psutil, "boot_time", lambda: 1_700_000_001.0)
    assert starts.boot_reference() == 1_700_000_000.0
    # another boot: a reference of its own
    _fresh_reference(monkeypatch, tmp_path, boot_id="boot-b")
    assert starts.boot_reference() == 1_700_000_001.0
    assert len(list(tmp_path.iterdir())) == 2


def test_a_reference_file_of_another_user_or_not_a_number_is_not_trusted(tmp_path, monkeypatch):
    _fresh_reference(monkeypatch, tmp_path)
    monkeypatch.setattr(psutil, "boot_time", lambda: 1_700_000_000.0)
    path = tmp_path / f"specdeck-boot-{os.geteuid()}-boot-a"
    path.write_text("not a number")
    assert starts.boot_reference() == 1_700_000_000.0  # psutil's, as it reads now
    if os.geteuid() == 0:
        path.write_text("1600000000.0")
        os.chown(path, 4321, 4321)
        _fresh_reference(monkeypatch, tmp_path)
        assert starts.boot_reference() == 1_700_000_000.0


def test_another_process_of_this_boot_computes_the_same_start(tmp_path):
    # the child's psutil is told the boot was at 0: it still counts from the recorded reference
    code = ("import sys, psutil; sys.path.insert(0, sys.argv[1]); psutil.boot_time = lambda: 0.0\n"
            "from backend.supervisor.starts import start_of; print(repr(start_of(int(sys.argv[2]))))")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parents[2]), str(os.getpid())],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == start_of(os.getpid())


@pytest.mark.timeout(60)
def test_a_step_of_the_wall_clock_does_not_make_a_child_a_stranger(monkeypatch):
    # Linux gives the boot time in whole seconds of the wall clock; after a clock step every
    # psutil create time moves by a second or more. A start counts from this boot's reference.
    with _sleeper() as p:
        start = start_of(p.pid)
        real_boot = psutil.boot_time()
        monkeypatch.setattr(psutil, "boot_time", lambda: real_boot + 1.0)
        monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real_boot + 1.0)
        # psutil's create time moved with the step; the start did not
        assert abs(psutil.Process(p.pid).create_time() - (start - starts.boot_reference() + real_boot + 1.0)) < 0.05
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
