"""Hand-written fakes with the same methods as the real OS seams."""

from __future__ import annotations

import signal
from concurrent.futures import Future

from backend.supervisor.osproc import Ident, Launch, SpawnHandle
from backend.supervisor.runfiles import ExitRecord, Identity, write_exit, write_identity
from specdeck_types.process import Kind, ProcessSpec


class FakeClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt

    sleep = advance


def fake_spec(tmp_path, name="p", **kw) -> ProcessSpec:
    """A spec of the program ``prog`` (only ever 'run' by FakeOS)."""
    kw.setdefault("stop_grace_s", 5.0)
    return ProcessSpec(name=name, kind=Kind.OTHER, argv=("prog", "--flag"), log_path=str(tmp_path / f"{name}.log"), **kw)


class FakeOS:
    """Spawner and killer in one: 'processes' are pids in a dict.

    spawn() behaves like the wrapper: it writes the identity file at once.
    exit() behaves like the wrapper when the child ends: the exit file.
    """

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.next_pid = 5000
        self.alive_procs: dict[int, float] = {}  # pid -> create time
        self.launches: list[Launch] = []
        self.missing: dict[str, str] = {}  # argv[0] -> the problem check() reports
        self.by_name: dict[str, tuple[Launch, int]] = {}
        self.signals: list[tuple[int, int]] = []  # (pid, sig)
        self.ignore_term: set[int] = set()
        self.spawn_error: Exception | None = None
        self.write_identity = True

    # -- Spawner ---------------------------------------------------------
    def spawn(self, launch: Launch) -> SpawnHandle:
        if self.spawn_error is not None:
            raise self.spawn_error
        self.launches.append(launch)
        wrapper, child = self.next_pid, self.next_pid + 1
        self.next_pid += 2
        ct = self.clock()
        self.alive_procs[wrapper] = ct
        self.alive_procs[child] = ct
        self.by_name[launch.name] = (launch, child)
        if self.write_identity:
            write_identity(launch.paths, Identity(launch.run_id, child, ct, wrapper, ct, ct, 0))
        return SpawnHandle(wrapper, ct)

    def reap(self) -> None:
        pass

    def check(self, argv, cwd, env) -> str | None:
        """A launch problem per program name (``missing``), as the real spawner's check reports it."""
        return self.missing.get(argv[0])

    def exit(self, name: str, code: int) -> None:
        launch, child = self.by_name[name]
        self.alive_procs.pop(child, None)
        self.alive_procs.pop(child - 1, None)  # the wrapper ends with its child
        write_exit(launch.paths, ExitRecord(launch.run_id, code, self.clock(), child))

    def pid_of(self, name: str) -> int:
        return self.by_name[name][1]

    # -- Killer ----------------------------------------------------------
    def is_alive(self, pid: int, create_time: float | None) -> bool:
        return self.alive_procs.get(pid) == create_time and create_time is not None

    def collect(self, root: Ident) -> list[Ident]:
        return [root] if self.is_alive(root.pid, root.create_time) else []

    def signal(self, targets, sig: int, pgid: int | None = None) -> int:
        n = 0
        for t in targets:
            if not self.is_alive(t.pid, t.create_time):
                continue
            self.signals.append((t.pid, sig))
            n += 1
            if sig == signal.SIGKILL or (sig == signal.SIGTERM and t.pid not in self.ignore_term):
                name = next(k for k, (_, c) in self.by_name.items() if c == t.pid)
                self.exit(name, -sig)
        return n

    def alive(self, targets) -> list[Ident]:
        return [t for t in targets if self.is_alive(t.pid, t.create_time)]


class FakeProber:
    def __init__(self):
        self.answers: list[bool] = []
        self.urls: list[str] = []
        self.closed = False

    def submit(self, url: str, timeout_s: float) -> "Future[bool]":
        self.urls.append(url)
        f: Future[bool] = Future()
        f.set_result(self.answers.pop(0) if self.answers else False)
        return f

    def close(self) -> None:
        self.closed = True
