"""Line output of the simulated server: SGLang-style prefixes, flushed line by line.

Scheduler and main-process messages go to stderr like Python logging does; uvicorn access
lines go to stdout like uvicorn's access logger. Each write is one flushed line under a
lock, so a supervisor that points both streams at one file sees whole lines in order.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from backend.sim.logfmt import Flavor, access_line

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50}


class Output:
    def __init__(self, flavor: Flavor, *, tp_size: int = 1, log_level: str = "info",
                 log_level_http: str | None = None, out: TextIO | None = None,
                 err: TextIO | None = None) -> None:
        self.flavor = flavor
        self.tp_size = max(1, tp_size)
        self.level = _LEVELS.get((log_level or "info").lower(), 20)
        self.http_level = _LEVELS.get((log_level_http or log_level or "info").lower(), 20)
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._lock = threading.Lock()

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            try:
                stream.write(text + "\n")
                stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def raw(self, text: str, *, level: int = 20, stdout: bool = False) -> None:
        """A line without prefix (tqdm progress, traceback body)."""
        if level >= self.level:
            self._write(self._out if stdout else self._err, text)

    def main(self, msg: str, *, level: int = 20) -> None:
        """A main-process line: timestamp prefix, never a rank tag."""
        if level >= self.level:
            self._write(self._err, self.flavor.prefix() + msg)

    def rank(self, msg: str, rank: int = 0, *, level: int = 20) -> None:
        """A scheduler line from one TP rank (tag only when TP > 1)."""
        if level >= self.level:
            self._write(self._err, self.flavor.prefix(rank, self.tp_size) + msg)

    def ranks(self, msg: str, *, level: int = 20) -> None:
        """The same scheduler line printed by every TP rank."""
        for r in range(self.tp_size):
            self.rank(msg, r, level=level)

    def access(self, client_port: int, method: str, path: str, status: int) -> None:
        if 20 >= self.http_level:
            self._write(self._out, self.flavor.prefix() + access_line(client_port, method, path, status))
