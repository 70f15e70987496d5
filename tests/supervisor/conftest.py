"""Fixtures for supervisor tests with real child processes.

Every process a test starts is ended at teardown: first through the
supervisor (SIGTERM, grace, SIGKILL), then, for anything left, by
process-group SIGTERM and SIGKILL of every identity the wrappers recorded.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from backend.supervisor.runfiles import read_json
from backend.supervisor.starts import same_start, start_of
from backend.supervisor.supervisor import Supervisor, SupervisorError
from specdeck_types.process import Kind, ProcessSpec
from state.store import Store

PY = sys.executable


def wait_for(pred, timeout_s: float = 15.0, interval_s: float = 0.05, poll=None):
    """Call ``poll`` and ``pred`` until pred is truthy; return its value or fail."""
    deadline = time.monotonic() + timeout_s
    while True:
        if poll is not None:
            poll()
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


def gone(pid: int, create_time: float | None = None) -> bool:
    """The process no longer exists (a zombie awaiting its reaper counts as gone)."""
    try:
        p = psutil.Process(pid)
        if create_time is not None and not same_start(create_time, start_of(pid)):
            return True
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _end_group(pid: int, ct: float | None) -> None:
    if gone(pid, ct):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not gone(pid, ct):
            time.sleep(0.05)
        if gone(pid, ct):
            return


class Env:
    def __init__(self, root: Path):
        self.root = root
        self.run_dir = root / "run"
        self.logs = root / "logs"
        self.store = Store(root / "state.db")
        self.sups: list[Supervisor] = []
        self.extra_pids: list[tuple[int, float | None]] = []

    def supervisor(self, **kw) -> Supervisor:
        sup = Supervisor(self.store, self.run_dir, **kw)
        self.sups.append(sup)
        return sup

    def spec(self, name: str, code: str, **kw) -> ProcessSpec:
        kw.setdefault("stop_grace_s", 2.0)
        return ProcessSpec(name=name, kind=kw.pop("kind", Kind.OTHER), argv=(PY, "-c", code),
                           log_path=str(self.logs / f"{name}.log"), cwd=str(self.root), **kw)

    def identity(self, name: str) -> dict | None:
        return read_json(self.run_dir / name / "identity.json")

    def cleanup(self) -> None:
        if self.sups:
            sup = self.sups[-1]
            try:
                sup.poll()
                for v in sup.views():
                    if v.state.is_active:
                        try:
                            sup.stop(v.name, actor="test", source="teardown", wait=True)
                        except SupervisorError:
                            pass
            except Exception:
                pass
        for sup in self.sups:
            sup.close()
        if self.run_dir.exists():
            for d in self.run_dir.iterdir():
                ident = read_json(d / "identity.json")
                if ident:
                    _end_group(int(ident["pid"]), ident.get("create_time"))
        for pid, ct in self.extra_pids:
            _end_group(pid, ct)
        self.store.close()


@pytest.fixture
def env(tmp_path):
    """A supervisor on a fake clock, spawner/killer and prober:
    (sup, clock, fos, prober, store, make, tmp_path); ``make()`` builds another on the same fakes."""
    from tests.supervisor.fakes import FakeClock, FakeOS, FakeProber

    store = Store(tmp_path / "state.db")
    clock = FakeClock()
    fos = FakeOS(clock)
    prober = FakeProber()
    made: list[Supervisor] = []

    def make(**kw) -> Supervisor:
        sup = Supervisor(store, tmp_path / "run", clock=clock, spawner=fos, killer=fos, prober=prober,
                         sleep=clock.sleep, **kw)
        made.append(sup)
        return sup

    sup = make()
    yield sup, clock, fos, prober, store, make, tmp_path
    for s in made:
        s.close()
    store.close()


@pytest.fixture
def real(tmp_path):
    env = Env(tmp_path)
    yield env
    env.cleanup()
