"""The supervisor's seams to the operating system.

Three small objects, each replaceable in tests by a fake with the same
methods:

- :class:`WrapperSpawner` starts ``python -m backend.supervisor.wrapper`` in
  a new session;
- :class:`OsKiller` answers "is this (pid, create time) alive?" and signals
  process trees, always checking the create time first so that a reused pid
  is never signalled;
- :class:`HttpProber` runs HTTP readiness checks on a small thread pool so
  that ``poll()`` never waits on the network.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol

import psutil

from backend.filemodes import make_private_dirs, open_private
from backend.supervisor.groups import group_members
from backend.supervisor.prestart import launch_problem
from backend.supervisor.runfiles import RunPaths, write_json_atomic
from backend.supervisor.starts import proc_stat, same_start, start_of

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Launch:
    """Everything the wrapper needs to start one run of a process."""

    name: str
    run_id: str
    argv: tuple[str, ...]
    cwd: str | None
    env: dict[str, str]
    log_path: str
    paths: RunPaths
    stop_grace_s: float = 10.0  # the wrapper's wait before SIGKILL of leftovers in the child's group
    spec_json: str | None = None  # the whole spec, so a rebuilt state store can re-adopt the run


@dataclass(frozen=True)
class SpawnHandle:
    wrapper_pid: int | None
    wrapper_create_time: float | None


@dataclass(frozen=True)
class Ident:
    """A process identity: pid plus start (:mod:`backend.supervisor.starts`;
    the field keeps the name it has in identity files and the state store)."""

    pid: int
    create_time: float | None


class Spawner(Protocol):
    def spawn(self, launch: Launch) -> SpawnHandle: ...
    def reap(self) -> None: ...
    def check(self, argv: tuple[str, ...], cwd: str, env: dict[str, str]) -> str | None: ...


class Killer(Protocol):
    def is_alive(self, pid: int, create_time: float | None) -> bool: ...
    def collect(self, root: Ident) -> list[Ident]: ...
    def signal(self, targets: Iterable[Ident], sig: int, pgid: int | None = None) -> int: ...
    def alive(self, targets: Iterable[Ident]) -> list[Ident]: ...


class Prober(Protocol):
    def submit(self, url: str, timeout_s: float) -> "Future[bool]": ...
    def close(self) -> None: ...


_WRAPPER_MODULE = "backend.supervisor.wrapper"


class WrapperSpawner:
    """Starts each run through the wrapper module, detached in a new session."""

    def __init__(self, python: str = sys.executable):
        self.python = python
        self._children: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()

    def spawn(self, launch: Launch) -> SpawnHandle:
        write_json_atomic(
            launch.paths.launch,
            {
                "name": launch.name,
                "run_id": launch.run_id,
                "argv": list(launch.argv),
                "cwd": launch.cwd,
                "env": dict(launch.env),
                "log_path": launch.log_path,
                "stop_grace_s": launch.stop_grace_s,
                **({"spec": json.loads(launch.spec_json)} if launch.spec_json else {}),
            },
        )
        make_private_dirs(Path(launch.log_path).parent)
        # The wrapper's own output (a traceback, say) lands in the same log (created 0600).
        with open_private(launch.log_path, "ab") as log:
            proc = subprocess.Popen(
                [self.python, "-m", _WRAPPER_MODULE, str(launch.paths.launch)],
                cwd=str(PROJECT_ROOT),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        with self._lock:
            self._children[proc.pid] = proc
        return SpawnHandle(proc.pid, start_of(proc.pid))

    def check(self, argv: tuple[str, ...], cwd: str, env: dict[str, str]) -> str | None:
        """Why the wrapper's exec of ``argv`` in ``cwd`` would fail, or None (see prestart)."""
        return launch_problem(argv, cwd, env)

    def reap(self) -> None:
        """Collect wrappers of ours that have ended (no zombies while we live)."""
        with self._lock:
            for pid, proc in list(self._children.items()):
                if proc.poll() is not None:
                    del self._children[pid]


class OsKiller:
    """Liveness and signals, keyed by pid *and* create time."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, float | None], psutil.Process] = {}

    def _process(self, pid: int, create_time: float | None) -> psutil.Process | None:
        key = (pid, create_time)
        p = self._cache.get(key)
        if p is None:
            try:
                p = psutil.Process(pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
                return None
            if create_time is None or not same_start(create_time, start_of(pid)):
                return None  # pid reused, or identity unknown: never treat it as ours
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = p
        return p

    def is_alive(self, pid: int, create_time: float | None) -> bool:
        if create_time is None:
            return False
        fast = proc_stat(pid)
        if fast is not None:
            # One read of /proc/<pid>/stat: state and start.  This is poll()'s hot path.
            state, start = fast
            return state not in (b"Z", b"X", b"x") and same_start(create_time, start)
        p = self._process(pid, create_time)
        if p is None:
            return False
        try:
            # is_running() compares the create time again, so a pid reused
            # since we cached the object reads as not running.
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            pass
        self._cache.pop((pid, create_time), None)
        return False

    def collect(self, root: Ident) -> list[Ident]:
        """The root, its descendants, and every member of its process group;
        nothing at all unless the root is alive with its recorded create time.

        The group is scanned only behind that check: a pid that now belongs
        to another process may lead an unrelated group of the same id.
        While the verified root lives, the group id is its own.
        """
        p = self._process(root.pid, root.create_time)
        if p is None or not self.is_alive(root.pid, root.create_time):
            return []
        found: dict[int, Ident] = {root.pid: root}
        # Descendants, except other managed runs (a wrapper and all it started): a job may start one
        # (a sweep relaunches a server), and that run is stopped by its own record, not with the job.
        stack = [p]
        while stack:
            cur = stack.pop()
            try:
                children = cur.children()
            except psutil.Error:
                continue
            for c in children:
                try:
                    if _WRAPPER_MODULE in c.cmdline():
                        continue
                    start = start_of(c.pid)
                except psutil.Error:
                    continue
                if start is None:
                    continue
                found[c.pid] = Ident(c.pid, start)
                stack.append(c)
        for ident in self._group_members(root.pid):
            found.setdefault(ident.pid, ident)
        return list(found.values())

    @staticmethod
    def _group_members(pgid: int) -> list[Ident]:
        """Live members of group ``pgid`` other than its leader (the root, found already)."""
        return [Ident(pid, start) for pid in group_members(pgid) if (start := start_of(pid)) is not None]

    def signal(self, targets: Iterable[Ident], sig: int, pgid: int | None = None) -> int:
        """Send ``sig`` to the group ``pgid`` (only while a verified target is
        still in it) and to each target outside that group whose create time
        still matches: each process gets it once.
        Returns how many targets were signalled."""
        targets = list(targets)
        live = [t for t in targets if self.is_alive(t.pid, t.create_time)]
        group_sent = False
        if pgid is not None and any(self._in_group(t.pid, pgid) for t in live):
            try:
                os.killpg(pgid, sig)
                group_sent = True
            except (ProcessLookupError, PermissionError):
                pass
        sent = 0
        for t in live:
            if group_sent and self._in_group(t.pid, pgid):
                # the group's signal reached it: a second SIGTERM could land inside its handler, and a
                # handler that takes a lock (Event.set, Popen) would then wait on itself until SIGKILL
                sent += 1
                continue
            p = self._process(t.pid, t.create_time)
            if p is None:
                continue
            try:
                p.send_signal(sig)  # psutil re-checks identity before kill()
                sent += 1
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return sent

    @staticmethod
    def _in_group(pid: int, pgid: int) -> bool:
        try:
            return os.getpgid(pid) == pgid
        except (ProcessLookupError, PermissionError):
            return False

    def alive(self, targets: Iterable[Ident]) -> list[Ident]:
        return [t for t in targets if self.is_alive(t.pid, t.create_time)]


def _http_ok(url: str, timeout_s: float) -> bool:
    # No proxies: readiness URLs point at this machine.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class HttpProber:
    """HTTP readiness checks on up to ``workers`` background threads."""

    def __init__(self, workers: int = 4):
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, url: str, timeout_s: float) -> "Future[bool]":
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="specdeck-probe")
            return self._pool.submit(_http_ok, url, timeout_s)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)
