"""The regeneration job: every input row asked again, written exactly once.

:class:`Job` reads the inputs twice, streamed: once at start to count them (``total``), write the
skipped rows not yet written and recount what earlier runs wrote (backend.regen.output.scan), then
again to ask every row whose id is in none of the output files.

Dispatch
    Each row goes to the server with the fewest requests in flight among those that are up and
    under their cap (``concurrency``, per server), so a slow server never holds back a fast one.
    A row's user turns are asked in order, each with the regenerated history (system turns kept,
    the original assistant turns dropped), on one server (backend.regen.turns).  What is written
    passes SpecForge's ``validate_regenerated_data.py``: system turns after the first user turn and
    empty turns are left out, and an empty answer is an error (``empty_answer``), not a row.

Failures (backend.regen.client classifies them)
    permanent   the row goes to the error file with the reason;
    transient   the row is asked again.  When the server did not answer at all it is marked
                ``waiting`` and probed with backoff until it answers; its rows go to the other
                servers, or wait for it, and that never counts against the row.  An HTTP 5xx, 429,
                timeout or abort while the server is up is retried after an exponential backoff
                with full jitter, at most ``max_attempts`` times; then the row is an error.  After a
                502/503/504 the server is probed first: when the probe fails too (SGLang still
                starting, a router without a live worker) it counts as away, not against the row.

Start-up
    Until some server has answered once (any HTTP answer to a probe or a request: a router without
    a live worker answering 503 is there), the job waits at most ``startup_timeout`` seconds from
    its first probe; then it ends, state ``failed``, exit 1, with every server's reason (an unknown
    host, a refused port, no answer), instead of waiting for an address that never answers.  A
    server that answered once and goes away is waited for.

Control
    SIGTERM / SIGINT: stop submitting, cancel what is in flight (asked again on resume), flush,
    state ``stopping``, exit 130.  Pause (SIGUSR1, or ``pause`` in ``OUT.control``, checked every
    second): stop submitting, let what is in flight finish, flush, state ``paused``, exit 0.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from typing import TYPE_CHECKING

from backend.readcap import SMALL_TEXT_MAX, read_text_capped
from backend.regen.client import PERMANENT, Outcome, ServerClient, backoff
from backend.regen.datasets import Skipped, read_mix
from backend.regen.output import (OutputWriter, RunFiles, error_record, scan, skipped_key, skipped_record,
                                  success_record)
from backend.regen.config import JobConfig, ServerSpec, write_job_json
from backend.regen.behind import Behind, read_router_metrics
from backend.regen.progress import SNAPSHOT_SECONDS, ProgressLog, Stats, last_snapshot
from backend.regen.records import Row
from backend.regen.turns import Task, ask_turns

if TYPE_CHECKING:
    from backend.regen.catalog import MixConfig
    from backend.regen.config import InputMix

EXIT_DONE, EXIT_FAILED, EXIT_STOPPED = 0, 1, 130
PROBE_MAX_S = 2.0      # a server that went away is probed at least this often
CONTROL_EVERY_S = 1.0  # how often OUT.control is read
TICK_S = 0.1
SAY_EVERY_S = 30.0     # a line on the terminal this often
_KEEP = object()
_TRANSIENT_MESSAGES = ("not answering", "waiting for", "reading the inputs")


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


class _Server:
    def __init__(self, spec: ServerSpec, cfg: JobConfig, stats: Stats) -> None:
        self.client = ServerClient(spec.url, name=spec.name, pool=cfg.concurrency,
                                   first_byte_timeout=cfg.first_byte_s, chunk_timeout=cfg.chunk_timeout)
        self.url = self.client.url
        self.cap = cfg.concurrency
        self.stats = stats.server(self.url, spec.name)
        self.stats.state = "down"
        self.down_since: float | None = None
        self.down_reason = ""
        self.prober: asyncio.Task | None = None


class Job:
    def __init__(self, cfg: JobConfig, *, say: Callable[[str], None] = lambda s: None,
                 rng: random.Random | None = None, pending_stop: Callable[[], str | None] = lambda: None) -> None:
        """``pending_stop``: a signal received before the job's own handlers were set (its name)."""
        cfg.check()
        self.cfg = cfg
        self.files = RunFiles.of(cfg.out)
        self.say = say
        self.rng = rng or random.Random()
        self.mode = "run"          # run | pause | stop
        self.wake = asyncio.Event()
        self.retry: deque[Task] = deque()
        self.backing_off = 0
        self.tasks: set[asyncio.Task] = set()
        self.sleepers: set[asyncio.Task] = set()
        self.stats: Stats | None = None
        self.writer: OutputWriter | None = None
        self.log: ProgressLog | None = None
        self.servers: list[_Server] = []
        self.exhausted = False
        self.fatal: Exception | None = None
        self.pending_stop = pending_stop
        self.probing_since: float | None = None
        self.gave_up: str | None = None     # why the run ended at start-up: no server ever answered
        self.repeats = 0                    # rows without ids that repeat an earlier row's turns
        self.replaced_before = 0            # characters written as U+FFFD by earlier runs (their rows' regen)

    # -- control ------------------------------------------------------------------------
    def request_pause(self, why: str) -> None:
        if self.mode == "run":
            self.mode = "pause"
            self._state("pausing", f"pausing ({why}): finishing {self.stats.in_flight()} rows in flight")
            for t in list(self.sleepers):
                t.cancel()
            self.wake.set()

    def request_stop(self, why: str) -> None:
        if self.mode != "stop":
            self.mode = "stop"
            self._state("stopping", f"stopping ({why}): {self.stats.in_flight()} rows in flight are asked "
                                    "again on resume")
            for t in list(self.tasks) + list(self.sleepers):
                t.cancel()
            self.wake.set()

    def _state(self, state: str, message: str | None | object = _KEEP, *, snap: bool = True) -> None:
        st = self.stats
        if st is None:
            return
        changed = st.state != state or (message is not _KEEP and message != st.message)
        st.state = state
        if message is not _KEEP:
            st.message = message  # type: ignore[assignment]
        if changed and snap:
            self._snapshot()

    def _snapshot(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            if self.stats is not None:
                self.stats.replaced_chars = self.replaced_before + self.writer.replaced
        if self.log is not None and self.stats is not None:
            self.log.write(self.stats.snapshot())

    # -- main -----------------------------------------------------------------------------
    async def run(self) -> int:
        self.log = ProgressLog(self.files.progress)
        try:
            return await self._run()
        finally:
            for s in self.servers:
                await s.client.close()
            try:
                if self.writer is not None:
                    self.writer.close()
            finally:
                self.log.close()

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        prev = last_snapshot(self.files.progress)
        self.stats = Stats(started_at=float(prev["started_at"]) if prev and prev.get("started_at") else time.time())
        self.files.control.unlink(missing_ok=True)
        write_job_json(self.files, self.cfg)
        handlers = {signal.SIGTERM: lambda: self.request_stop("SIGTERM"),
                    signal.SIGINT: lambda: self.request_stop("SIGINT"),
                    signal.SIGUSR1: lambda: self.request_pause("SIGUSR1")}
        for sig, fn in handlers.items():
            loop.add_signal_handler(sig, fn)
        try:
            self._state("starting", "reading the inputs and the output written so far")
            early = self.pending_stop()
            if early:
                self.request_stop(early)
                self.stats.state = "stopping"
                self.stats.message = f"stopped ({early}) while starting, before the inputs were read; resume with " \
                                     "the same command"
                self._snapshot()
                return EXIT_STOPPED
            existing = scan(self.files)
            notes = existing.repaired + existing.bad_lines
            for n in notes:
                self.say(n)
            self.writer = OutputWriter(self.files)
            self.servers = [_Server(s, self.cfg, self.stats) for s in self.cfg.servers]
            for spec, srv in zip(self.cfg.servers, self.servers):
                if spec.metrics:  # a router: its workers' counts from its exporter, at each progress line
                    self.stats.behind[srv.url] = Behind(spec.metrics)
            mix = self.cfg.mix_config()
            await self._count(mix, existing)
            if self.mode == "stop":
                return self._finish(EXIT_STOPPED)
            self.say(f"{self.stats.total} rows: {self.stats.done} done, {self.stats.failed} failed, "
                     f"{self.stats.skipped} skipped; {self._remaining()} to ask")
            if self.repeats:
                notes.append(self._repeats_note())
                self.say(notes[-1])
            self.stats.message = "; ".join(notes)[:500] if notes else None
            self.probing_since = time.monotonic()
            await asyncio.gather(*(self._first_probe(s) for s in self.servers))
            ticker = asyncio.create_task(self._ticker())
            try:
                await self._dispatch(mix, existing)
            finally:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)
            if self.fatal is not None:
                raise self.fatal
            if self.gave_up is not None:
                self._state("failed", self.gave_up)
                return EXIT_FAILED
            if self.mode == "stop":
                return self._finish(EXIT_STOPPED)
            if self.mode == "pause":
                self.files.control.unlink(missing_ok=True)
                self._state("paused", f"paused: {self._remaining()} rows left; resume with the same command")
                return EXIT_DONE
            replaced = self.replaced_before + self.writer.replaced
            await self._read_behind_now()  # the last line's counts of the workers behind a router
            self._state("done", f"done: {self.stats.done} regenerated, {self.stats.failed} failed, "
                                f"{self.stats.skipped} skipped" + (
                                    f"; {replaced} character(s) that are not valid Unicode written as U+FFFD "
                                    "(regen.replaced_chars marks their rows)" if replaced else "")
                                + (f"; {self.repeats} repeated row(s) without an id asked" if self.repeats else ""))
            return EXIT_DONE
        except Exception as exc:
            self.stats.message = f"failed: {type(exc).__name__}: {exc}"[:500]
            self.stats.state = "failed"
            try:  # keep the rows still buffered, when the writer can
                if self.writer is not None:
                    self.writer.flush()
            except Exception:
                pass
            try:  # and say so in the progress log even when the output cannot be written
                self.log.write(self.stats.snapshot())
            except Exception:
                pass
            raise
        finally:
            for s in self.servers:
                if s.prober is not None:
                    s.prober.cancel()
            for sig in handlers:
                loop.remove_signal_handler(sig)

    def _finish(self, code: int) -> int:
        self.stats.state = "stopping"
        self.stats.message = f"stopped: {self._remaining()} rows left; resume with the same command"
        self._snapshot()
        return code

    def _remaining(self) -> int:
        st = self.stats
        return max(0, st.total - st.done - st.failed - st.skipped)

    def _repeats_note(self) -> str:
        return (f"{self.repeats} row(s) without an id have the same turns as an earlier row: each is asked "
                "(ids <hash>-2, -3, ...), as SpecForge asks every row; give the rows ids to tell them apart")

    def _items(self, mix: "MixConfig | InputMix") -> Iterator[Row | Skipped]:
        return read_mix(mix, Path(self.cfg.root or "."))

    async def _count(self, mix: "MixConfig | InputMix", existing) -> None:
        st, n = self.stats, 0
        for item in self._items(mix):
            n += 1
            if n % 2000 == 0:
                await asyncio.sleep(0)
                if self.mode == "stop":
                    return
            st.total += 1
            ds = st.dataset(item.dataset)
            ds["total"] += 1
            if isinstance(item, Skipped):
                key = skipped_key(item.dataset, item.line, item.id)
                if key not in existing.skipped:
                    existing.skipped.add(key)
                    self.writer.add("skipped", skipped_record(item.id, item.record, item.reason, item.dataset,
                                                              item.line))
                st.record_skipped(item.dataset)
                continue
            if item.repeat:
                self.repeats += 1
            regen = existing.done.get(item.id)
            if regen is not None:
                self.replaced_before += int(regen.get("replaced_chars") or 0)
                st.record_done(item.dataset, str(regen.get("server") or ""), int(regen.get("prompt_tokens") or 0),
                               int(regen.get("completion_tokens") or 0), live=False)
                st.answer_tokens(int(regen.get("completion_tokens") or 0))
                st.record_spec(item.dataset, _int(regen.get("spec_tokens")), _int(regen.get("spec_verify_ct")))
                continue
            regen = existing.failed.get(item.id)
            if regen is not None:
                self.replaced_before += int(regen.get("replaced_chars") or 0)
                st.record_failed(item.dataset, regen.get("server"), str(regen.get("class") or "error"),
                                 str(regen.get("error") or ""))
        self.writer.flush()
        # From here on only the ids matter: keep sets, not every row's accounting.
        existing.done, existing.failed = set(existing.done), set(existing.failed)

    # -- servers --------------------------------------------------------------------------
    async def _first_probe(self, s: _Server) -> None:
        ok, why = await s.client.probe()
        if ok:
            s.stats.state = "up"
        else:
            self._server_away(s, why, first=True)

    def _server_away(self, s: _Server, why: str, first: bool = False) -> None:
        s.stats.last_error = why
        if s.prober is not None and not s.prober.done():
            return
        s.stats.state = "down" if first else "waiting"
        s.down_since = time.monotonic()
        s.down_reason = why
        s.prober = asyncio.create_task(self._probe_until_up(s))
        self._update_state()

    async def _probe_until_up(self, s: _Server) -> None:
        attempt = 0
        while self.mode != "stop":
            await asyncio.sleep(max(0.05, backoff(attempt, self.rng, base=0.25, cap=PROBE_MAX_S)))
            attempt += 1
            ok, why = await s.client.probe()
            if ok:
                s.stats.state = "up"
                s.down_since = None
                self.say(f"{s.url} answers again")
                self._update_state()
                self.wake.set()
                return
            s.down_reason = why

    def _check_startup(self, now: float) -> None:
        """End the run when no server has answered within ``startup_timeout`` of the first probe."""
        if self.probing_since is None or self.mode != "run" or any(s.client.answered for s in self.servers):
            return
        if now - self.probing_since < self.cfg.startup_timeout:
            return
        why = "; ".join(f"{s.url}: {s.down_reason or s.stats.last_error or 'no answer'}" for s in self.servers)
        self.gave_up = (f"no server answered within {self.cfg.startup_timeout:g} s of start: {why}. Check the "
                        "address; a server still loading its model needs a longer --startup-timeout")
        self.request_stop("no server answered")

    def _update_state(self, snap: bool = True) -> None:
        if self.mode != "run" or self.stats is None:
            return
        away = [s for s in self.servers if s.stats.state != "up"]
        if not away:
            msg = self.stats.message
            self._state("running", None if msg and msg.startswith(_TRANSIENT_MESSAGES) else msg, snap=snap)
            return
        parts = [f"{s.url} ({s.down_reason}), {int(time.monotonic() - (s.down_since or time.monotonic()))} s"
                 for s in away]
        if len(away) == len(self.servers):
            self._state("waiting", "waiting for " + "; ".join(parts), snap=snap)
        else:
            self._state("running", "not answering: " + "; ".join(parts) + f"; {len(self.servers) - len(away)} "
                                   "server(s) serving", snap=snap)

    def _pick(self) -> _Server | None:
        best = None
        for s in self.servers:
            if s.stats.state == "up" and s.stats.in_flight < s.cap:
                if best is None or s.stats.in_flight < best.stats.in_flight:
                    best = s
        return best

    # -- dispatch -------------------------------------------------------------------------
    async def _dispatch(self, mix: "MixConfig | InputMix", existing) -> None:
        source = (it for it in self._items(mix) if not isinstance(it, Skipped) and not existing.seen(it.id))
        self._update_state()
        while self.mode == "run":
            self.wake.clear()
            s = self._pick()
            if s is None:
                await self.wake.wait()
                continue
            task = self.retry.popleft() if self.retry else None
            if task is None and not self.exhausted:
                row = next(source, None)
                if row is None:
                    self.exhausted = True
                else:
                    task = Task(row)
            if task is None:
                if not self.tasks and not self.backing_off and not self.retry:
                    break
                await self.wake.wait()
                continue
            s.stats.in_flight += 1
            t = asyncio.create_task(self._ask(task, s))
            self.tasks.add(t)
            t.add_done_callback(self._task_done)
        if self.mode == "pause":
            while self.tasks:
                await asyncio.gather(*list(self.tasks), return_exceptions=True)
        elif self.mode == "stop":
            await asyncio.gather(*list(self.tasks), *list(self.sleepers), return_exceptions=True)
        if self.writer is not None:
            self.writer.flush()

    def _task_done(self, t: asyncio.Task) -> None:
        self.tasks.discard(t)
        self.sleepers.discard(t)
        self.wake.set()

    async def _ask(self, task: Task, s: _Server) -> None:
        out: Outcome | None = None
        try:
            out = await ask_turns(task, s.client, self.cfg)
        finally:
            s.stats.in_flight -= 1
            self.wake.set()
        try:
            self._settle(task, s, out)
        except Exception as exc:  # the output cannot be written: end the run, keep what is on disk
            if self.fatal is None:
                self.fatal = exc
            self.request_stop(f"{type(exc).__name__}: {exc}")

    def _settle(self, task: Task, s: _Server, out: Outcome | None) -> None:
        st, row = self.stats, task.row
        if out is None:  # every turn answered
            regen = {"server": s.url, "prompt_tokens": task.prompt_tokens,
                     "completion_tokens": task.completion_tokens, "finish_reason": task.finish_reason,
                     "dataset": row.dataset, "t": round(time.time(), 3), "retries": task.retries}
            if task.spec_verify_ct:
                regen["spec_tokens"], regen["spec_verify_ct"] = task.spec_tokens, task.spec_verify_ct
            self.writer.add("success", success_record(row.id, row.record, task.history, regen))
            st.record_done(row.dataset, s.url, task.prompt_tokens, task.completion_tokens)
            st.record_spec(row.dataset, task.spec_tokens, task.spec_verify_ct)
            st.answer_tokens(task.completion_tokens)
        elif out.kind == PERMANENT:
            self._fail(task, s, out.error_class or "error", out.message, out.status)
        else:
            s.stats.last_error = out.message
            if out.server_down:
                self._server_away(s, out.message)
            else:
                task.strikes += 1
                if task.strikes >= self.cfg.max_attempts:
                    self._fail(task, s, out.error_class or "transient",
                               f"gave up after {task.strikes} attempts: {out.message}", out.status)
                    return
            if self.mode != "run":
                return  # asked again on resume
            task.retries += 1
            s.stats.retries += 1
            if out.server_down:
                self.retry.append(task)
                self.wake.set()
            else:
                t = asyncio.create_task(self._later(task, backoff(task.strikes, self.rng)))
                self.sleepers.add(t)
                t.add_done_callback(self._task_done)
        if self.writer.due():
            self.writer.flush()

    def _fail(self, task: Task, s: _Server, cls: str, message: str, status: int | None) -> None:
        row = task.row
        regen = {"server": s.url, "dataset": row.dataset, "class": cls, "status": status,
                 "t": round(time.time(), 3), "retries": task.retries}
        self.writer.add("error", error_record(row.id, row.record, message, regen))
        self.stats.record_failed(row.dataset, s.url, cls, message)

    async def _later(self, task: Task, delay: float) -> None:
        self.backing_off += 1
        try:
            await asyncio.sleep(delay)
            self.retry.append(task)
        finally:
            self.backing_off -= 1
            self.wake.set()

    async def _ticker(self) -> None:
        last_snap = last_ctl = last_say = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            self._check_startup(now)
            if self.writer.due():
                self.writer.flush()
            if now - last_ctl >= CONTROL_EVERY_S:
                last_ctl = now
                if self._control() == "pause":
                    self.request_pause(f"{self.files.control.name}")
            if now - last_say >= SAY_EVERY_S:
                last_say = now
                self.say(self._summary())
            if now - last_snap >= SNAPSHOT_SECONDS:
                last_snap = now
                self._read_behind()
                self._update_state(snap=False)
                self._snapshot()

    def _read_behind(self) -> None:
        """Read each router's exporter off the loop (one read at a time per router); the next progress
        line carries what it found."""
        for b in self.stats.behind.values():
            task = getattr(b, "task", None)
            if task is not None and not task.done():
                continue

            async def read(b=b) -> None:
                try:
                    b.update(await asyncio.to_thread(read_router_metrics, b.metrics_url))
                except (OSError, ValueError) as exc:
                    b.failed_read(f"{type(exc).__name__}: {exc}")

            b.task = asyncio.get_running_loop().create_task(read())

    async def _read_behind_now(self) -> None:
        for b in self.stats.behind.values():
            try:
                b.update(await asyncio.wait_for(asyncio.to_thread(read_router_metrics, b.metrics_url), 5))
            except (OSError, ValueError, asyncio.TimeoutError) as exc:
                b.failed_read(f"{type(exc).__name__}: {exc}")

    def _summary(self) -> str:
        st = self.stats
        snap = st.snapshot()
        left = snap["remaining"]
        eta = "-" if not left else "N/A" if not snap["req_s"] else f"{left / snap['req_s'] / 60:.0f} min"
        return (f"{st.state}: {st.done + st.failed + st.skipped:,}/{st.total:,} ({st.done:,} done, {st.failed:,} "
                f"failed, {st.skipped:,} skipped), {snap['in_flight']} in flight, {snap['req_s']:.1f} req/s, "
                f"{snap['tok_s']:.0f} tok/s, ETA {eta}" + (f" - {st.message}" if st.message else ""))

    def _control(self) -> str | None:
        try:
            text = read_text_capped(self.files.control, SMALL_TEXT_MAX)[0].strip().lower()
        except OSError:
            return None
        return text.split()[0] if text else None


def run_job(cfg: JobConfig, *, say: Callable[[str], None] = lambda s: None,
            pending_stop: Callable[[], str | None] = lambda: None) -> int:
    """Run ``cfg`` in this process until done, paused or stopped; the exit status."""
    return asyncio.run(Job(cfg, say=say, pending_stop=pending_stop).run())
