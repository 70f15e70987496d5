"""The supervisor's background tick: ``poll()`` on a thread of its own."""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

log = logging.getLogger("backend.supervisor.supervisor")


class Pollable(Protocol):
    """What the loop drives: :class:`backend.supervisor.supervisor.Supervisor`, or a stand-in."""

    def poll(self) -> object: ...


class SupervisorLoop:
    """Runs ``supervisor.poll()`` every ``interval_s`` on a background thread,
    so the dashboard never polls on its render path.

    >>> loop = SupervisorLoop(sup, interval_s=1.0); loop.start(); ...; loop.stop()
    """

    def __init__(self, supervisor: Pollable, interval_s: float = 1.0):
        self.supervisor = supervisor
        self.interval_s = interval_s
        self.polls = 0
        self.last_poll_at: float | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        with self._lock:
            if self.running:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="specdeck-supervisor", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.supervisor.poll()
                self.last_error = None
            except Exception as exc:  # keep polling; the next tick may succeed
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("supervisor poll failed")
            self.polls += 1
            self.last_poll_at = time.time()
            backup = getattr(self.supervisor, "daily_backup", None)
            if callable(backup):  # one automatic backup of the state store a day, beside it
                try:
                    backup()
                except Exception:
                    log.exception("the daily backup of the state store failed")
            self._stop.wait(self.interval_s)
