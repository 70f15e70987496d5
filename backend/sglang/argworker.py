"""Warm parsers: one long-lived :mod:`backend.sglang.argprobe` process per serving python
and environment, so that only the first check of a launch command waits for sglang's
import (seconds); every later one is parsed in a fork of the warm process (tens of ms).

A parser process:

* runs in a session of its own, with this process's environment plus the launch's
  additions (the server's ``env``): other additions, another parser, since sglang may
  read them at import.  Each request carries the whole environment of the moment
  (``CUDA_VISIBLE_DEVICES`` included), which its fork takes before parsing;
* is one of at most :data:`MAX_PARSERS`; starting another ends the one used longest ago;
* answers one request at a time (a lock per parser);
* ends by itself when its stdin closes (this process ended, however) or after
  :data:`IDLE_S` without a request; :func:`close_all` ends them at exit;
* is ended (SIGTERM, a grace period, then SIGKILL to its group) when it does not answer
  in time, and replaced on the next request.

A request sent to a parser that had ended meanwhile (its idle time ran out just then) is
sent once more to a fresh one.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from backend.supervisor.groups import group_members

PROBE_PATH = Path(__file__).with_name("argprobe.py")
PREFIX = "specdeck-argcheck: "
IDLE_S = 1800.0  # a parser with no request for this long ends (it holds sglang's import, ~400 MB)
MAX_PARSERS = 4
_GRACE_S = 2.0


@lru_cache(maxsize=1)
def _source() -> str:
    return PROBE_PATH.read_text(encoding="utf-8")


@dataclass
class Stats:
    started: int = 0  # parser processes started
    requests: int = 0  # requests sent


stats = Stats()


class _Ended(Exception):
    """The parser ended before answering."""


def _exit_status(pid: int) -> int | None:
    """How our child ``pid`` ended (negative: by that signal), or None while it runs; never
    reaps it, so its pid, and with it its process group's id, stays reserved."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return 0  # reaped already
    if info is None:
        return None
    return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status


def _group_live(pgid: int) -> bool:
    """Whether a live (not zombie) process is in process group ``pgid``, its leader included."""
    return _exit_status(pgid) is None or bool(group_members(pgid))


class Parser:
    """One warm parser process and the threads that read its output.

    The process is reaped only by :meth:`end`, after its group is empty: until then its
    pid cannot be taken by another process, so signals to its group reach only its own."""

    def __init__(self, python: str, env: dict[str, str], idle_s: float) -> None:
        self.python = python
        self.env = env  # the environment it imported sglang in
        self.proc = subprocess.Popen([python, "-c", _source(), "serve", f"{idle_s:g}"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     start_new_session=True)
        self.used = time.monotonic()
        stats.started += 1
        self.lock = threading.Lock()
        self._answers: queue.Queue[dict | None] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=20)
        threading.Thread(target=self._read, name=f"argworker-out-{self.proc.pid}", daemon=True).start()
        threading.Thread(target=self._drain, name=f"argworker-err-{self.proc.pid}", daemon=True).start()

    def _read(self) -> None:
        with self.proc.stdout:
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith(PREFIX):
                    try:
                        self._answers.put(json.loads(line[len(PREFIX):]))
                    except ValueError:
                        self._answers.put({"ok": False, "kind": "failed",
                                           "error": "the parser's answer is not JSON"})
        self._answers.put(None)  # end of output: the process has ended (reaped later, by end())

    def _drain(self) -> None:
        with self.proc.stderr:
            for raw in self.proc.stderr:
                text = raw.decode("utf-8", "replace").strip()
                if text:
                    self._stderr.append(text)

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and _exit_status(self.proc.pid) is None

    def ask(self, request: dict, deadline: float) -> dict:
        """The answer to ``request``; :class:`_Ended` when the process ended first,
        :class:`TimeoutError` at ``deadline`` (monotonic)."""
        self.used = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise _Ended(str(exc)) from exc
        stats.requests += 1
        try:
            ans = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError from None
        if ans is None:
            raise _Ended(self.last_words())
        return ans

    def last_words(self) -> str:
        code = self.proc.returncode
        limit = time.monotonic() + 5
        while code is None and (code := _exit_status(self.proc.pid)) is None and time.monotonic() < limit:
            time.sleep(0.02)
        tail = self._stderr[-1] if self._stderr else "no output"
        return f"exit status {code}: {tail}"

    def close(self) -> None:
        """Close its input (it ends by itself), then :meth:`end` it."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        limit = time.monotonic() + _GRACE_S
        while self.alive and time.monotonic() < limit:
            time.sleep(0.02)
        self.end()

    def end(self) -> None:
        """SIGTERM to its process group while anything in it lives, a grace period, then
        SIGKILL to what is left (a parse that ignores SIGTERM); then reap it."""
        pgid = self.proc.pid
        if self.proc.returncode is None:  # not reaped: the group id is still this parser's
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if not _group_live(pgid):
                    break
                try:
                    os.killpg(pgid, sig)
                except OSError:
                    break
                limit = time.monotonic() + _GRACE_S
                while _group_live(pgid) and time.monotonic() < limit:
                    time.sleep(0.02)
        try:
            self.proc.wait(timeout=_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        try:
            self.proc.stdin.close()
        except OSError:
            pass


_parsers: dict[tuple[str, tuple[tuple[str, str], ...]], Parser] = {}
_lock = threading.Lock()
# Applied by each request's fork, and read by nothing at import: a parser serves every value.
PER_REQUEST = frozenset({"CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED"})


def environment(additions: dict[str, str]) -> dict[str, str]:
    """This process's environment with the launch's additions (no PYTHONSTARTUP)."""
    env = dict(os.environ)
    env.update(additions)
    env.pop("PYTHONSTARTUP", None)
    return env


def _key(python: str, additions: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return python, tuple(sorted((k, v) for k, v in additions.items() if k not in PER_REQUEST))


def existing(python: str, additions: dict[str, str]) -> Parser | None:
    """The warm parser for ``python`` and ``additions`` when one runs now; never starts one."""
    with _lock:
        p = _parsers.get(_key(python, additions))
    return p if p is not None and p.alive else None


def _parser(python: str, additions: dict[str, str]) -> tuple[Parser, bool]:
    """The warm parser for ``python`` and ``additions`` (started when there is none); whether
    it is new.  Parsers it replaces or evicts are closed on a thread of their own, never
    under the lock, and one that is answering is never evicted."""
    key = _key(python, additions)
    gone: list[Parser] = []
    with _lock:
        p = _parsers.get(key)
        if p is not None and p.alive:
            return p, False
        if p is not None:
            gone.append(_parsers.pop(key))
        idle = [k for k, v in _parsers.items() if not v.lock.locked()]
        while len(_parsers) >= MAX_PARSERS and idle:
            oldest = min(idle, key=lambda k: _parsers[k].used)
            idle.remove(oldest)
            gone.append(_parsers.pop(oldest))
        p = _parsers[key] = Parser(python, environment(additions), IDLE_S)
    for old in gone:
        threading.Thread(target=old.close, name="argworker-close", daemon=True).start()
    return p, True


def _drop(p: Parser) -> None:
    with _lock:
        for k, v in list(_parsers.items()):
            if v is p:
                del _parsers[k]
    p.end()


def warm(python: str, additions: dict[str, str]) -> None:
    """Start the parser for ``python`` and the launch's environment ``additions`` now (its
    import runs meanwhile); never waits."""
    try:
        _parser(python, additions)
    except OSError:
        pass  # the check that follows says why


def ask(python: str, additions: dict[str, str], request: dict, timeout_s: float) -> dict:
    """SGLang's answer to ``request`` from the warm parser for ``python`` and the launch's
    environment ``additions`` (see the module text); on no answer,
    ``{"ok": False, "kind": "failed", "error": ...}``."""
    deadline = time.monotonic() + timeout_s
    request = {**request, "env": environment(additions)}
    for attempt in (1, 2):
        try:
            p, new = _parser(python, additions)
        except OSError as exc:
            return {"ok": False, "kind": "failed", "error": f"cannot run {python}: {exc.strerror or exc}"}
        with p.lock:
            try:
                return p.ask(request, deadline)
            except TimeoutError:
                _drop(p)
                return {"ok": False, "kind": "failed",
                        "error": f"SGLang's parser did not answer within {timeout_s:.0f} s"}
            except _Ended as exc:
                _drop(p)
                if new or attempt == 2:
                    return {"ok": False, "kind": "failed", "error": str(exc)}
                # it had ended on its own (idle) just before the request: once more, with a fresh one
    raise AssertionError("unreachable")


def ask_existing(python: str, additions: dict[str, str], request: dict, timeout_s: float) -> dict | None:
    """Like :func:`ask`, but only of a parser that runs now, and with the environment the
    request carries (``request["env"]``, another process's); None when there is none, or it
    ended before answering."""
    p = existing(python, additions)
    if p is None:
        return None
    deadline = time.monotonic() + timeout_s
    with p.lock:
        try:
            return p.ask(request, deadline)
        except TimeoutError:
            _drop(p)
            return {"ok": False, "kind": "failed",
                    "error": f"SGLang's parser did not answer within {timeout_s:.0f} s"}
        except _Ended:
            _drop(p)
            return None


def running() -> list[int]:
    """Pids of the parser processes alive now."""
    with _lock:
        return [p.proc.pid for p in _parsers.values() if p.alive]


def close_all() -> None:
    """End every parser (each ends on its closed input; its group is ended if it does not)."""
    with _lock:
        ps = list(_parsers.values())
        _parsers.clear()
    for p in ps:
        p.close()


atexit.register(close_all)
