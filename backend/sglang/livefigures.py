"""The live figures of a server, compared like with like (pure functions).

The configured ``baseline_tok_s`` is the decode speed of ONE request without
speculation.  A decode line's ``gen throughput`` is the aggregate over every
running request, so it is only comparable with the baseline when exactly one
request runs; otherwise the comparable figure is the per-request decode speed,
``gen throughput / #running-req``.  The aggregate is shown as what it is (the
sum at N running requests) and never compared with the single-stream baseline.

Colours follow the ratio to the reference, never the sign of a difference:
``≥ 1.00×`` green, ``0.90-1.00×`` amber, ``< 0.90×`` red.  An accept_len at or
below the alert floor is red whatever its delta: "+0.00 vs lifetime" at 1.00
means speculation gains nothing.

A baseline MEASURED at the server's concurrency (a stored benchmark without
speculation, :mod:`backend.bench.baseline`) is compared with the aggregate
figure: aggregate tok/s at ``c`` running requests against the baseline's output
tok/s at concurrency ``c``.  Measured at another concurrency only, the ratio is
shown with the concurrency it was measured at, uncoloured: it is not the same
load.  The configured single-stream figure is the fallback where no baseline of
the target is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from backend.sglang.alerts import ACCEPT_FLOOR


class BaselineChoice(Protocol):
    """What these figures read of the baseline chosen for a server (the benchmark domain's
    ``backend.bench.baseline.BaselineChoice``, passed in by the page: this domain does not import it)."""

    concurrency: int | None
    exact: bool
    label: str
    measured: tuple[int, ...]
    other_lengths: tuple[str, ...]

    def ratio(self, aggregate_tok_s: float | None) -> float | None: ...

GOOD_RATIO = 1.0  # at or above: green
WARN_RATIO = 0.9  # at or above (and below GOOD_RATIO): amber; below: red
SAME_DELTA = 0.005  # an accept_len delta that rounds to ±0.00 is no change

Level = Literal["good", "warn", "bad", "none"]
THRESHOLDS_TEXT = (f"green ≥ {GOOD_RATIO:.2f}×, amber {WARN_RATIO:.2f}-{GOOD_RATIO:.2f}×, "
                   f"red < {WARN_RATIO:.2f}×")


def ratio_level(ratio: float | None) -> Level:
    """good / warn / bad by the ratio to the reference; none when there is no ratio."""
    if ratio is None or ratio != ratio:  # None or nan
        return "none"
    if ratio >= GOOD_RATIO:
        return "good"
    if ratio >= WARN_RATIO:
        return "warn"
    return "bad"


@dataclass(frozen=True)
class SpeedFigures:
    """Decode speed of the latest decode line, split into what can and cannot meet the baseline."""

    aggregate: float | None  # gen throughput of the line, all running requests together
    running: int | None  # #running-req of the line
    per_request: float | None  # aggregate / running (the single-stream figure when running == 1)
    baseline: float | None  # configured single-stream baseline
    ratio: float | None  # per_request / baseline
    level: Level

    @property
    def basis(self) -> str:
        if self.running == 1:
            return "single-stream decode (1 running request)"
        if self.running:
            return f"per-request decode ({self.running:,} running requests)"
        return "per-request decode"

    @property
    def comparison(self) -> str:
        """The sentence the page shows, e.g. 'per-request decode 84.1 tok/s vs single-stream baseline 90.0 tok/s (0.93×)'."""
        if self.per_request is None:
            if self.aggregate is not None and not self.running:
                return "no request running in the latest decode line: nothing to compare with the baseline"
            return "no decode line in this run yet"
        head = f"{self.basis} {self.per_request:,.1f} tok/s"
        if self.running and self.running > 1:
            head += f" (= aggregate {self.aggregate:,.1f} ÷ {self.running:,})"
        if self.baseline is None:
            return head + "; no single-stream baseline configured (set baseline_tok_s)"
        return f"{head} vs single-stream baseline {self.baseline:,.1f} tok/s ({self.ratio:.2f}×)"

    @property
    def aggregate_text(self) -> str:
        if self.aggregate is None:
            return "no decode line in this run yet"
        n = "?" if self.running is None else f"{self.running:,}"
        return f"aggregate {self.aggregate:,.1f} tok/s at {n} running request{'s' if self.running != 1 else ''}"


@dataclass(frozen=True)
class Latest:
    """A server's newest decode figures (of its current run; of the whole log where runs are not told apart)."""
    decode: dict  # the decode series they come from: ts, accept_len, gen_throughput, running_req, ...
    accept_len: float | None  # the newest accept length logged
    lifetime_accept_len: float | None  # the server's own lifetime average (/server_info)
    gen_throughput: float | None  # of the last decode line
    running_req: int | None  # of the last decode line


def newest(series: list, default=None):
    """The newest value of ``series`` that is not None."""
    for v in reversed(series):
        if v is not None:
            return v
    return default


def latest(snap) -> Latest:
    """The newest decode figures of a server snapshot (``run_decode``, else ``decode``)."""
    dec = snap.run_decode if snap.run_decode is not None else snap.decode
    last = len(dec["ts"]) - 1
    return Latest(dec, newest(dec["accept_len"]), snap.lifetime_accept_len,
                  dec["gen_throughput"][last] if last >= 0 else None, dec["running_req"][last] if last >= 0 else None)


def speed_figures(gen_throughput: float | None, running_req: int | None,
                  baseline_tok_s: float | None) -> SpeedFigures:
    per = None
    if gen_throughput is not None and running_req is not None and running_req > 0:
        per = gen_throughput / running_req
    ratio = per / baseline_tok_s if per is not None and baseline_tok_s else None
    return SpeedFigures(gen_throughput, running_req, per, baseline_tok_s, ratio, ratio_level(ratio))


def _requests(n: int | None) -> str:
    return f"{'?' if n is None else f'{n:,}'} running request{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class MeasuredFigures:
    """Aggregate tok/s now against the baseline measured at (or nearest to) the same concurrency."""

    aggregate: float | None  # gen throughput of the latest decode line
    running: int | None  # #running-req of that line
    choice: BaselineChoice
    ratio: float | None  # aggregate / the baseline's output tok/s
    level: Level  # by the ratio at the same concurrency; "none" at another one

    @property
    def delta(self) -> str | None:
        """Short enough for a metric at 1024 px: ``0.93× baseline`` or ``0.93× base @16``."""
        if self.ratio is None:
            return None
        if self.choice.exact:
            return f"{self.ratio:.2f}× baseline"
        return f"{self.ratio:.2f}× base @{self.choice.concurrency}"

    @property
    def comparison(self) -> str:
        """The sentence the page shows, e.g. 'aggregate 82.3 tok/s at 1 running request vs baseline 90.0 tok/s
        measured at concurrency 1, 2026-11-29 (0.91×)'."""
        if self.aggregate is None:
            return "no decode line in this run yet"
        if not self.running:
            return ("no request running in the latest decode line: nothing to compare with the baseline "
                    f"(measured at concurrency {', '.join(map(str, self.choice.measured))})")
        head = f"aggregate {self.aggregate:,.1f} tok/s at {_requests(self.running)} vs {self.choice.label}"
        if self.ratio is None:
            text = head
        elif self.choice.exact:
            text = f"{head} ({self.ratio:.2f}×)"
        else:
            text = (f"{head}: {self.ratio:.2f}×, but not at the same load, so neither faster nor slower "
                    f"(uncoloured); measure the baseline at concurrency {self.running} to compare")
        if self.choice.other_lengths:
            text += (f"; at concurrency {self.choice.concurrency} also measured with "
                     f"{' and '.join(self.choice.other_lengths)}")
        return text


def measured_figures(gen_throughput: float | None, running_req: int | None,
                     choice: BaselineChoice) -> MeasuredFigures:
    ratio = choice.ratio(gen_throughput) if running_req else None
    level = ratio_level(ratio) if choice.exact else "none"
    return MeasuredFigures(gen_throughput, running_req, choice, ratio, level)


@dataclass(frozen=True)
class AcceptDelta:
    text: str | None  # "+0.12 tokens vs lifetime"; None when either side is missing
    level: Level


def accept_vs_lifetime(current: float | None, lifetime: float | None, *,
                       floor: float = ACCEPT_FLOOR) -> AcceptDelta:
    """The latest accept_len against this run's lifetime average.

    At or below ``floor`` it is bad whatever the delta; a delta that rounds to
    zero is no change (neither good nor bad); otherwise by the ratio.
    """
    if current is None:
        return AcceptDelta(None, "none")
    if lifetime is None:
        return AcceptDelta(f"≤ {floor:.2f}: no gain", "bad") if current <= floor else AcceptDelta(None, "none")
    delta = current - lifetime
    if current <= floor:  # short: it must fit a metric's delta at 1024 px
        return AcceptDelta(f"{delta:+.2f} · no gain", "bad")
    text = f"{delta:+.2f} tokens vs lifetime"
    if abs(delta) < SAME_DELTA:
        return AcceptDelta(text, "none")
    return AcceptDelta(text, ratio_level(current / lifetime if lifetime > 0 else None))


def prefix_cache_hit_pct(prefill: dict | None, metrics=None) -> tuple[float | None, str]:
    """Prefix-cache hit as a percentage (0-100), and where it comes from.

    ``prefill`` is a prefill record as a dict (``ServerSnapshot.latest_prefill``).
    Older logs print ``cache hit rate: 37.50%`` (already a percentage); newer
    ones print ``#new-token`` and ``#cached-token``, whose ratio is the same
    figure; ``/metrics`` has ``sglang:cache_hit_rate`` as a fraction (0-1).
    """
    if prefill is not None:
        pct = (prefill.get("fields") or {}).get("cache_hit_rate_pct")
        if pct is not None:
            return float(pct), "the latest prefill line's cache hit rate"
        new, cached = prefill.get("new_token"), prefill.get("cached_token")
        if new is not None and cached is not None and new + cached > 0:
            return 100.0 * cached / (new + cached), "the latest prefill line: #cached-token ÷ (#new + #cached)"
    value = getattr(metrics, "get", lambda _name: None)("cache_hit_rate") if metrics is not None else None
    if value is not None:
        return 100.0 * value, "/metrics sglang:cache_hit_rate"
    return None, "no prefill line or cache_hit_rate metric in this run yet"
