"""The progress log of a regeneration run (writer side): ``OUT.progress.jsonl``.

One JSON object per line, appended every :data:`SNAPSHOT_SECONDS` while the job runs and once at
every state change; the last complete line is the current state (the fields are listed in
:meth:`Stats.snapshot`).  Counts are cumulative over every resume: at start they are recomputed
from the ids in the output files.  Rates (``req_s``, ``tok_s``) are over the last
:data:`WINDOW_S` seconds of completions.  ``completion_tokens_hist`` counts answers (one per user
turn asked) by completion tokens: ``counts[i]`` holds ``edges[i] <= n < edges[i+1]``; the last bin
also holds everything above the last edge.

``spec_recorded`` (true) says the job records the server's per-request speculative figures; a
dataset with rows whose answers gave them (SGLang's ``spec_tokens_details``) also carries
``spec_rows`` (those rows), ``spec_tokens`` and ``spec_verify_ct`` (their sums) and ``accept_len``
(``spec_tokens / spec_verify_ct``); a dataset without carries none of the four.
"""

from __future__ import annotations

import bisect
import json
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.filemodes import make_private_dirs, open_private

SNAPSHOT_SECONDS = 2.0
WINDOW_S = 30
HIST_EDGES = (0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
STATES = ("starting", "running", "waiting", "pausing", "paused", "stopping", "done", "failed")


@dataclass
class _Rate:
    window: float = WINDOW_S
    events: deque = field(default_factory=deque)  # (t, tokens)
    tokens: int = 0

    def add(self, t: float, tokens: int) -> None:
        self.events.append((t, tokens))
        self.tokens += tokens

    def rates(self, now: float, started: float) -> tuple[float, float]:
        while self.events and self.events[0][0] < now - self.window:
            self.tokens -= self.events.popleft()[1]
        span = min(self.window, max(now - started, 1e-9))
        if span < 1.0:
            span = 1.0
        return round(len(self.events) / span, 3), round(self.tokens / span, 1)


@dataclass
class ServerStats:
    name: str | None
    state: str = "up"
    in_flight: int = 0
    done: int = 0
    failed: int = 0
    retries: int = 0
    last_error: str | None = None
    rate: _Rate = field(default_factory=_Rate)


class Stats:
    """Every counter of a run, and the snapshot the progress log records."""

    def __init__(self, *, started_at: float, clock=time.time) -> None:
        self.clock = clock
        self.started_at = started_at
        self.run_started = clock()
        self.state = "starting"
        self.message: str | None = None
        self.total = 0
        self.done = self.failed = self.skipped = 0
        self.prompt_tokens = self.completion_tokens = 0
        self.datasets: dict[str, dict[str, int]] = {}
        self.servers: dict[str, ServerStats] = {}
        self.hist = [0] * (len(HIST_EDGES) - 1)
        self.errors: dict[str, dict[str, Any]] = {}
        self.rate = _Rate()
        self.replaced_chars = 0  # characters written as U+FFFD: text that is not valid Unicode
        self.behind: dict[str, Any] = {}  # router URL -> backend.regen.behind.Behind (its workers)

    def dataset(self, name: str) -> dict[str, int]:
        d = self.datasets.get(name)
        if d is None:
            d = self.datasets[name] = {"total": 0, "done": 0, "failed": 0, "skipped": 0}
        return d

    def server(self, url: str, name: str | None = None) -> ServerStats:
        s = self.servers.get(url)
        if s is None:
            s = self.servers[url] = ServerStats(name)
        elif name and not s.name:
            s.name = name
        return s

    def answer_tokens(self, n: int) -> None:
        i = bisect.bisect_right(HIST_EDGES, n) - 1
        self.hist[min(max(i, 0), len(self.hist) - 1)] += 1

    def add_error(self, cls: str, example: str) -> None:
        e = self.errors.setdefault(cls, {"count": 0, "example": example[:300]})
        e["count"] += 1

    def record_done(self, dataset: str, server: str, prompt_tokens: int, completion_tokens: int,
                    live: bool = True) -> None:
        self.done += 1
        self.dataset(dataset)["done"] += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        if server:
            s = self.server(server)
            s.done += 1
            if live:
                s.rate.add(self.clock(), completion_tokens)
        if live:
            self.rate.add(self.clock(), completion_tokens)

    def record_spec(self, dataset: str, tokens: int, verify_ct: int) -> None:
        """A done row's speculative figures (nothing when its answers gave none)."""
        if verify_ct > 0 and tokens > 0:
            d = self.dataset(dataset)
            d["spec_rows"] = d.get("spec_rows", 0) + 1
            d["spec_tokens"] = d.get("spec_tokens", 0) + tokens
            d["spec_verify_ct"] = d.get("spec_verify_ct", 0) + verify_ct

    def record_failed(self, dataset: str, server: str | None, cls: str, example: str) -> None:
        self.failed += 1
        self.dataset(dataset)["failed"] += 1
        if server:
            self.server(server).failed += 1
        self.add_error(cls, example)

    def record_skipped(self, dataset: str) -> None:
        self.skipped += 1
        self.dataset(dataset)["skipped"] += 1

    def in_flight(self) -> int:
        return sum(s.in_flight for s in self.servers.values())

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        req_s, tok_s = self.rate.rates(now, self.run_started)
        servers = {}
        for url, s in self.servers.items():
            r, t = s.rate.rates(now, self.run_started)
            servers[url] = {"name": s.name, "state": s.state, "in_flight": s.in_flight, "done": s.done,
                            "failed": s.failed, "retries": s.retries, "req_s": r, "tok_s": t,
                            "last_error": s.last_error}
        return {
            "t": round(now, 3), "state": self.state, "started_at": round(self.started_at, 3),
            "total": self.total, "done": self.done, "failed": self.failed, "skipped": self.skipped,
            "in_flight": self.in_flight(),
            "remaining": max(0, self.total - self.done - self.failed - self.skipped),
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "req_s": req_s, "tok_s": tok_s, "window_s": WINDOW_S,
            "datasets": {k: _with_accept_len(v) for k, v in self.datasets.items()},
            "spec_recorded": True,
            "servers": servers,
            "completion_tokens_hist": {"edges": list(HIST_EDGES), "counts": list(self.hist)},
            "errors": {k: dict(v) for k, v in self.errors.items()},
            "replaced_chars": self.replaced_chars,
            "behind": {url: b.snapshot() for url, b in self.behind.items()},
            "message": self.message,
        }


def _with_accept_len(d: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = dict(d)
    if d.get("spec_verify_ct"):
        out["accept_len"] = round(d["spec_tokens"] / d["spec_verify_ct"], 4)
    return out


class ProgressLog:
    """Appends snapshots to ``OUT.progress.jsonl``; holds an advisory lock on it while open, so a
    second job (or a requeue) on the same output is refused."""

    def __init__(self, path: Path) -> None:
        import fcntl

        self.path = path
        make_private_dirs(path.parent)
        self._fh = open_private(path, "ab")
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._fh.close()
            raise RunLocked(f"{path}: another regeneration job is writing this output") from None
        self._repair()
        self.last_write = 0.0

    def _repair(self) -> None:
        from backend.regen.output import repair_torn_tail

        repair_torn_tail(self.path)

    def write(self, snap: dict[str, Any]) -> None:
        # errors="replace": a lone surrogate quoted in a message must not stop the log (or the job)
        line = (json.dumps(snap, ensure_ascii=False) + "\n").encode("utf-8", "replace")
        try:
            self._fh.write(line)
            self._fh.flush()
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.path)) from exc
        self.last_write = time.monotonic()

    def close(self) -> None:
        try:
            os.fsync(self._fh.fileno())
        except OSError:
            pass
        self._fh.close()


class RunLocked(RuntimeError):
    """Another process holds the output's progress log."""


def locked(path: Path) -> bool:
    """Whether a job holds the progress log ``path`` right now."""
    import fcntl

    try:
        fh = open_private(path, "ab")
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False


def last_snapshot(path: Path, *, tail_bytes: int = 1 << 20) -> dict[str, Any] | None:
    """The last complete line of a progress log, read from its end; None when there is none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - tail_bytes))
            buf = f.read(tail_bytes)
    except FileNotFoundError:
        return None
    for line in reversed(buf.split(b"\n")[:-1]):  # what follows the last newline is torn
        if line.strip():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    return None
