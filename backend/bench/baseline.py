"""The measured baseline a live server is compared with (pure functions, no I/O).

A baseline is a stored benchmark result without speculation on the same
target model.  "Faster or slower than the baseline" is only said at the same
load, so a live server running ``c`` requests is compared with the baseline
measured at concurrency ``c``; where none was measured there, the nearest
measured concurrency is shown and named, and the comparison says it is not the
same load.

* **Same target**: the result's ``target_model`` names the server's model (its
  ``served_model_name``, its ``model_path`` or that path's folder name, compared
  without case); a result that does not name its target counts when it was
  measured on a server of the same name.
* **Same lengths, where known**: given input and output lengths, a baseline
  measured with other lengths is left out; one that did not record them is kept.
* **Nearest concurrency**: the smallest ``|measured - running|``; a tie goes to
  the higher concurrency.  Among several baselines at that concurrency the
  newest wins (by start, else by when it was stored).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Iterable

from specdeck_types.bench import BenchResult


def _norm(name: str) -> set[str]:
    """A model name and its folder name, as compared: no case, no trailing slash."""
    s = name.strip().rstrip("/").lower()
    if not s:
        return set()
    return {s, s.rsplit("/", 1)[-1]}


def target_names(model_path: str | None, served_model_name: str | None = None) -> frozenset[str]:
    """The names a stored result may give this server's target model."""
    out: set[str] = set()
    for n in (model_path, served_model_name):
        if n:
            out |= _norm(n)
    return frozenset(out)


def same_target(result: BenchResult, server: str, names: Iterable[str]) -> bool:
    target = result.config.target_model
    if target and target.strip():
        return bool(_norm(target) & set(names))
    return result.server == server


def _tok_s(r: BenchResult) -> float | None:
    v = r.results.output_tok_s
    return v if v is not None and math.isfinite(v) and v > 0 else None


def _when(r: BenchResult) -> float:
    return r.started_at or r.created_at or 0.0


def _lengths_fit(r: BenchResult, input_len: int | None, output_len: int | None) -> bool:
    for want, got in ((input_len, r.load.input_len), (output_len, r.load.output_len)):
        if want is not None and got is not None and want != got:
            return False
    return True


def lengths_text(r: BenchResult) -> str | None:
    """``1024/512 tokens in/out``; None when neither length was recorded."""
    i, o = r.load.input_len, r.load.output_len
    if i is None and o is None:
        return None
    return f"{'?' if i is None else f'{i:,}'}/{'?' if o is None else f'{o:,}'} tokens in/out"


def date_text(r: BenchResult) -> str:
    """The local date it was measured (``2026-11-29``), or ``stored 2026-11-30`` when the run's own date is
    not known (hand-entered numbers)."""
    if r.started_at:
        return time.strftime("%Y-%m-%d", time.localtime(r.started_at))
    if r.created_at:
        return "stored " + time.strftime("%Y-%m-%d", time.localtime(r.created_at))
    return "date not recorded"


@dataclass(frozen=True)
class BaselineChoice:
    """The baseline chosen for a server running ``running`` requests, and why."""

    result: BenchResult | None
    running: int | None  # the server's concurrency now (None or 0: nothing running)
    measured: tuple[int, ...]  # every concurrency with a baseline of this target, ascending
    unplaced: int = 0  # baselines of this target whose concurrency was not recorded (not usable)
    other_lengths: tuple[str, ...] = ()  # other lengths measured at the chosen concurrency
    configured_tok_s: float | None = None  # the server's configured single-stream baseline_tok_s, if any

    @property
    def configured_applies(self) -> bool:
        """No baseline of this target is stored, so the configured single-stream figure stands in for one."""
        return not self.measured and self.configured_tok_s is not None and self.configured_tok_s > 0

    @property
    def tok_s(self) -> float | None:
        return _tok_s(self.result) if self.result is not None else None

    @property
    def concurrency(self) -> int | None:
        return self.result.load.concurrency if self.result is not None else None

    @property
    def exact(self) -> bool:
        """Measured at the concurrency the server runs now: the only case that says faster or slower."""
        return self.result is not None and self.running is not None and self.concurrency == self.running

    @property
    def stored(self) -> bool:
        """Some baseline of this target is stored (at some concurrency)."""
        return bool(self.measured)

    @property
    def label(self) -> str:
        """``baseline 90.0 tok/s measured at concurrency 1, 2026-11-29`` (+ lengths), or why there is none."""
        if self.result is None:
            if not self.measured:
                text = "no baseline (a run without speculation) of this target is stored"
                if self.unplaced:
                    text += (f"; {self.unplaced:,} stored without a recorded concurrency "
                             f"{'was' if self.unplaced == 1 else 'were'} left out")
                return text
            return "no request running: nothing to compare; baselines measured at concurrency " + \
                ", ".join(map(str, self.measured))
        text = f"baseline {self.tok_s:,.1f} tok/s measured at concurrency {self.concurrency}, {date_text(self.result)}"
        lengths = lengths_text(self.result)
        if lengths:
            text += f", {lengths}"
        if not self.exact:
            text += f" (nearest measured: {self.concurrency}, the server runs {self.running})"
        return text

    def ratio(self, aggregate_tok_s: float | None) -> float | None:
        """Aggregate tok/s now ÷ the baseline's output tok/s."""
        base = self.tok_s
        if base is None or aggregate_tok_s is None or not math.isfinite(aggregate_tok_s):
            return None
        return aggregate_tok_s / base


def choose_baseline(results: Iterable[BenchResult], *, server: str, names: Iterable[str], running: int | None,
                    input_len: int | None = None, output_len: int | None = None) -> BaselineChoice:
    """The stored baseline to compare server ``server`` (target ``names``) with while it runs ``running``
    requests; see the module docstring for the rules."""
    names = set(names)
    mine = [r for r in results if r.is_baseline and _tok_s(r) is not None and same_target(r, server, names)
            and _lengths_fit(r, input_len, output_len)]
    placed = [r for r in mine if r.load.concurrency is not None and r.load.concurrency >= 1]
    measured = tuple(sorted({r.load.concurrency for r in placed}))  # type: ignore[misc]
    unplaced = len(mine) - len(placed)
    if not placed or running is None or running < 1:
        return BaselineChoice(None, running, measured, unplaced)
    c = min(measured, key=lambda m: (abs(m - running), -m))
    at_c = [r for r in placed if r.load.concurrency == c]
    best = max(at_c, key=lambda r: (_when(r), r.id or 0))
    chosen_lengths = lengths_text(best)
    others = tuple(sorted({t for r in at_c if (t := lengths_text(r)) and t != chosen_lengths}))
    return BaselineChoice(best, running, measured, unplaced, others)


def server_baseline(results: Iterable[BenchResult], *, server: str, model_path: str | None,
                    served_model_name: str | None, configured_tok_s: float | None, running: int | None,
                    input_len: int | None = None, output_len: int | None = None) -> BaselineChoice:
    """The one answer on a server's baseline, for the Servers page's live figures and the Benchmarks page's
    runs alike: the stored baseline of its target at (or nearest to) ``running`` requests
    (:func:`choose_baseline`), carrying the configured single-stream ``baseline_tok_s``, which stands in
    only while no baseline of the target is stored (:attr:`BaselineChoice.configured_applies`)."""
    choice = choose_baseline(results, server=server, names=target_names(model_path, served_model_name),
                             running=running, input_len=input_len, output_len=output_len)
    return replace(choice, configured_tok_s=configured_tok_s)


# -- measuring one ------------------------------------------------------------

def sweep_argv(server: str, concurrency: int) -> list[str]:
    """The command that measures the baseline of ``server`` at ``concurrency``: relaunch without
    speculation, benchmark, restore the server as it was (``bench sweep --baseline-only``)."""
    return ["python", "-m", "backend.cli", "bench", "sweep", server, "--baseline-only",
            "--concurrency", str(concurrency)]


# -- reading the store --------------------------------------------------------

class StoredBaselines:
    """The stored baselines, read again only when the benchmark results change (a live page asks every
    refresh).  ``store`` is a :class:`state.store.Store`."""

    def __init__(self, store):
        from state.bench import BenchStore  # noqa: PLC0415

        self._bench = BenchStore(store)
        self._key: tuple | None = None
        self._baselines: list[BenchResult] = []

    def baselines(self) -> list[BenchResult]:
        newest = self._bench.list(limit=1)
        key = (self._bench.count(), newest[0].id if newest else None)
        if key != self._key:
            self._baselines = [r for r in self._bench.list() if r.is_baseline]
            self._key = key
        return self._baselines

    def choose(self, server: str, model_path: str | None, served_model_name: str | None,
               running: int | None, configured_tok_s: float | None = None) -> BaselineChoice:
        return server_baseline(self.baselines(), server=server, model_path=model_path,
                               served_model_name=served_model_name, configured_tok_s=configured_tok_s,
                               running=running)
