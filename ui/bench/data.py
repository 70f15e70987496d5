"""The Benchmarks page's data: stored results as table rows, their filters and their names.

Pure functions over :class:`~specdeck_types.bench.BenchResult` (no Streamlit): what a
configuration is called on the page, the table with one row per result, the filter choices
and their application.  A missing figure stays missing (``None`` / NaN), never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable

import pandas as pd

from backend.flows.bench_runner import router_accept_why
from backend.sglang.alerts import ACCEPT_FLOOR
from backend.sglang.livefigures import THRESHOLDS_TEXT, ratio_level
from specdeck_types.bench import RUN, BenchResult

NA = "N/A"
FILTERS = (  # (label, key) of the multiselect filters, in the order shown
    ("Target", "target"),
    ("Draft", "draft"),
    ("Dataset", "dataset"),
    ("Concurrency", "concurrency"),
)


def _value(r: BenchResult, key: str):
    if key == "target":
        return r.config.target_model
    if key == "draft":
        return r.config.draft_model if not r.is_baseline else None
    if key == "dataset":
        return r.load.dataset
    if key == "concurrency":
        return r.load.concurrency
    raise KeyError(key)


def option(v) -> str:
    """A filter choice as shown: the value, or N/A for a result that does not say."""
    return NA if v is None else str(v)


def filter_options(results: Iterable[BenchResult]) -> dict[str, list[str]]:
    """For each filter, the choices the results offer (numbers in numeric order, N/A last)."""
    out: dict[str, list[str]] = {}
    results = list(results)
    for _, key in FILTERS:
        values = {_value(r, key) for r in results if not (key == "draft" and r.is_baseline)}
        known = sorted((v for v in values if v is not None), key=lambda v: (isinstance(v, str), v))
        out[key] = [option(v) for v in known] + ([NA] if None in values else [])
    return out


def apply_filters(results: Iterable[BenchResult], chosen: dict[str, list[str]]) -> list[BenchResult]:
    """The results whose every filtered field is among the chosen values (an empty choice keeps all).

    A baseline has no draft: the draft filter keeps it, so a draft is always seen beside it."""
    def keep(r: BenchResult, key: str) -> bool:
        if not chosen.get(key) or (key == "draft" and r.is_baseline):
            return True
        return option(_value(r, key)) in chosen[key]

    return [r for r in results if all(keep(r, key) for _, key in FILTERS)]


def server_of(r: BenchResult) -> str:
    """Who was measured: the server's name, else the target model, else the file it came from."""
    return r.server or r.config.target_model or (r.source_file or NA)


def config_label(r: BenchResult) -> str:
    """The configuration in a few words: ``EAGLE3 · <draft> · 3 steps · topk 1 · 5 draft tokens · CUDA graph``."""
    c = r.config
    if r.is_baseline:
        return "no speculation"
    if not c.algorithm:
        return "speculation not recorded"
    parts = [c.algorithm]
    if c.draft_model:
        parts.append(_short(c.draft_model))
    if c.num_steps is not None:
        parts.append(f"{c.num_steps} steps")
    if c.topk is not None:
        parts.append(f"topk {c.topk}")
    if c.num_draft_tokens is not None:
        parts.append(f"{c.num_draft_tokens} draft tokens")
    if c.cuda_graph is not None:
        parts.append("CUDA graph" if c.cuda_graph else "no CUDA graph")
    return " · ".join(parts)


def _short(path: str) -> str:
    """A model given as a path shows its last component."""
    p = path.rstrip("/")
    return p.rsplit("/", 1)[-1] if "/" in p else p


def lengths(r: BenchResult) -> str:
    i, o = r.load.input_len, r.load.output_len
    if i is None and o is None:
        return "lengths N/A"
    return f"{option(i)}/{option(o)} tok"


def load_label(r: BenchResult) -> str:
    c = r.load.concurrency
    return f"concurrency {option(c)}, {lengths(r)}"


def load_short(r: BenchResult) -> str:
    """The load in a table cell: ``c1 · 128/256 tok``."""
    return f"c{option(r.load.concurrency)} · {lengths(r)}"


def series_label(r: BenchResult) -> str:
    """One chart series: a server's configuration at one pair of lengths."""
    return f"{server_of(r)} · {config_label(r)}"


def when(r: BenchResult) -> float | None:
    """When the run started; for a result without a start (hand-entered, some imports), when it was stored."""
    return r.started_at if r.started_at is not None else r.created_at


def source_label(r: BenchResult) -> str:
    if r.imported:
        return f"imported ({r.format})"
    return "run here" if r.source == "run" else r.source


def _date(ts: float | None):
    """Local time, as the rest of the dashboard shows it."""
    return pd.Timestamp(datetime.fromtimestamp(ts)) if ts is not None else pd.NaT


@dataclass(frozen=True)
class Verdict:
    """Does speculation pay in this run: a word, and the level that colours it (the Servers page's mapping)."""

    word: str
    level: str  # good / warn / bad / none
    ratio: float | None = None


PAYS, DOES_NOT_PAY, NO_BASELINE = "pays", "does not pay", "no baseline at this load"
LEVEL_CSS = {"good": "color: #15803d; font-weight: 600", "warn": "color: #b45309; font-weight: 600",
             "bad": "color: #b91c1c; font-weight: 600", "none": "color: #6b7280"}
LEVEL_MARK = {"good": "✓", "warn": "✗", "bad": "✗", "none": "–"}


def verdict(r: BenchResult, ratio: float | None, has_baseline: bool) -> Verdict | None:
    """The verdict of a speculative run against its baseline at the same load (None for a baseline):
    pays at ≥ 1.00×, does not pay below (amber 0.90-1.00×, red under); without a ratio, an accept_len at or
    below the floor does not pay whatever the tok/s (the draft is never accepted: a round gives one token
    and costs more than a plain step); otherwise no baseline at this load, or N/A when tok/s is missing."""
    if r.is_baseline:
        return None
    if ratio is not None:
        level = ratio_level(ratio)
        return Verdict(PAYS if level == "good" else DOES_NOT_PAY, level, ratio)
    acc = r.accept_len
    if acc is not None and acc <= ACCEPT_FLOOR:
        return Verdict(DOES_NOT_PAY, "bad")
    if has_baseline:
        return Verdict(f"{NA}: tok/s not recorded", "none")
    return Verdict(NO_BASELINE, "none")


def verdict_text(v: Verdict | None) -> str | None:
    return None if v is None else f"{LEVEL_MARK[v.level]} {v.word}"


VERDICT_HELP = (f"against the baseline of the same server at the same concurrency and lengths: pays at ≥ 1.00×; "
                f"colours {THRESHOLDS_TEXT}; an accept_len at or below {ACCEPT_FLOOR:.2f} does not pay whatever "
                "the tok/s (the draft is never accepted). Blank on a baseline.")

# The columns that answer "does speculation pay?", shown first; the rest behind the table's toggle.
LEAD = ("id", "configuration", "load", "output tok/s", "accept_len", "speedup", "verdict")

# Column name -> (dataframe dtype, printf-style display format); order is the table's order.
COLUMNS: dict[str, tuple[str, str | None]] = {
    "id": ("Int64", "%d"),
    "verdict": ("object", None),
    "speedup": ("float64", "%.2f×"),
    "configuration": ("object", None),
    "load": ("object", None),
    "accept_len": ("float64", "%.2f"),
    "server": ("object", None),
    "target": ("object", None),
    "draft": ("object", None),
    "algorithm": ("object", None),
    "steps": ("Int64", "%d"),
    "topk": ("Int64", "%d"),
    "draft tokens": ("Int64", "%d"),
    "CUDA graph": ("object", None),
    "TP": ("Int64", "%d"),
    "dataset": ("object", None),
    "concurrency": ("Int64", "%d"),
    "input len": ("Int64", "%d"),
    "output len": ("Int64", "%d"),
    "output tok/s": ("float64", "%.1f"),
    "req/s": ("float64", "%.2f"),
    "TTFT p50 ms": ("float64", "%.1f"),
    "TTFT p99 ms": ("float64", "%.1f"),
    "TPOT p50 ms": ("float64", "%.2f"),
    "TPOT p99 ms": ("float64", "%.2f"),
    "ITL p50 ms": ("float64", "%.2f"),
    "ITL p99 ms": ("float64", "%.2f"),
    "accept_len (run)": ("float64", "%.2f"),
    "accept_len (lifetime)": ("float64", "%.2f"),
    "GPU-hours": ("float64", "%.2f"),
    "energy kWh": ("float64", "%.3f"),
    "source": ("object", None),
    "tool": ("object", None),
    "label": ("object", None),
    "date": ("datetime64[ns]", "YYYY-MM-DD HH:mm"),
    "stored": ("datetime64[ns]", "YYYY-MM-DD HH:mm"),
}
COLUMNS = {**{k: COLUMNS[k] for k in LEAD}, **{k: v for k, v in COLUMNS.items() if k not in LEAD}}
HELP = {
    "verdict": VERDICT_HELP,
    "speedup": "output tok/s ÷ the baseline's at the same load (a stored run without speculation, else the "
               "server's configured single-stream baseline_tok_s at concurrency 1); N/A: no baseline at this load",
    "configuration": "the server and its speculative configuration: algorithm · draft · steps · topk · draft "
                     "tokens · CUDA graph",
    "load": "c: concurrency · input/output lengths in tokens",
    "accept_len": ("the run's accept length, else the server's lifetime average; through a router, the servers "
                   "behind it weighted by their requests, or N/A with why"),
    "accept_len (run)": "accept length measured during this run only",
    "accept_len (lifetime)": "the server's average since it started (bench_serving's accept_length)",
    "date": "when the run started (N/A: not recorded, e.g. hand-entered numbers)",
    "stored": "when Specdeck stored the result",
    "CUDA graph": "on / off; N/A: not recorded",
    "GPU-hours": "the server's GPUs × the run's duration (its tensor parallelism where the server is not in this "
                 "workspace); N/A: no start and end time recorded, or no GPU known",
    "energy kWh": "the server's GPUs' energy over the run from NVML's energy counter, else their power readings "
                  "(the whole GPUs' draw); N/A: the GPUs are not known or the readings cover less than 90 % of the "
                  "run (telemetry kept while the dashboard ran)",
    "tool": "the program that wrote an imported result (SGLang bench_serving, vLLM bench serve, SpecForge ...); "
            "N/A: the file did not show which",
}


def _yes_no(v: bool | None) -> str | None:
    return None if v is None else ("on" if v else "off")


def table(results: Iterable[BenchResult], verdicts: dict[int, Verdict | None] | None = None,
          costs: dict | None = None) -> pd.DataFrame:
    """One row per result, newest first, in :data:`COLUMNS`; missing figures are missing (NA), not 0.
    ``verdicts`` (by result id) fill the verdict and speedup columns, ``costs`` (by result id, a
    ``backend.flows.cost.Cost``) the GPU-hours and energy."""
    rows = []
    verdicts = verdicts or {}
    costs = costs or {}
    for r in results:
        c, ld, f = r.config, r.load, r.results
        v = verdicts.get(r.id)
        cost = costs.get(r.id)
        rows.append({
            "id": r.id, "verdict": "baseline" if r.is_baseline and not r.invalid else verdict_text(v), "speedup": v.ratio if v is not None else None,
            "configuration": series_label(r), "load": load_short(r), "accept_len": r.accept_len, "server": server_of(r), "target": _short(c.target_model) if c.target_model else None,
            "draft": None if r.is_baseline or not c.draft_model else _short(c.draft_model),
            "algorithm": c.algorithm, "steps": c.num_steps, "topk": c.topk, "draft tokens": c.num_draft_tokens,
            "CUDA graph": _yes_no(c.cuda_graph), "TP": c.tp, "dataset": ld.dataset, "concurrency": ld.concurrency,
            "input len": ld.input_len, "output len": ld.output_len, "output tok/s": f.output_tok_s,
            "req/s": f.request_s, "TTFT p50 ms": f.ttft_ms.median, "TTFT p99 ms": f.ttft_ms.p99,
            "TPOT p50 ms": f.tpot_ms.median, "TPOT p99 ms": f.tpot_ms.p99, "ITL p50 ms": f.itl_ms.median,
            "ITL p99 ms": f.itl_ms.p99, "accept_len (run)": f.accept_len,
            "accept_len (lifetime)": f.accept_len_lifetime,
            "GPU-hours": cost.gpu_hours if cost is not None else None,
            "energy kWh": cost.energy_kwh if cost is not None else None,
            "source": source_label(r), "tool": r.tool_name,
            "label": r.label,
            "date": _date(r.started_at), "stored": _date(r.created_at),
            "_when": when(r) or 0.0,
        })
    df = pd.DataFrame(rows, columns=[*COLUMNS, "_when"])
    for name, (dtype, _) in COLUMNS.items():
        df[name] = df[name].astype(dtype) if dtype != "object" else df[name].astype(object)
    df = df.sort_values(["_when", "id"], ascending=False, kind="stable").drop(columns="_when")
    return df.reset_index(drop=True)


ROUTER_ACCEPT_OLD = "recorded before the servers behind a router were read (a router has no decode lines)"


def accept_text(r: BenchResult, routers: Iterable[str] = ()) -> str | None:
    """The Runs table's accept_len cell: the figure, or for a result measured through a router
    "N/A (through router NAME: why)"; None (the table's N/A) for any other missing figure."""
    if r.accept_len is not None:
        return f"{r.accept_len:.2f}"
    why = router_accept_why(r)
    if why is None and r.source == RUN and r.server in set(routers):
        why = ROUTER_ACCEPT_OLD
    return None if why is None else f"N/A (through router {r.server}: {why})"


def with_accept_text(df: pd.DataFrame, results: Iterable[BenchResult], routers: Iterable[str] = ()) -> pd.DataFrame:
    """``df`` (from :func:`table`) with its accept_len column as text (:func:`accept_text`), so a result
    through a router says why it has none rather than showing a blank cell."""
    routers = list(routers)
    texts = {r.id: accept_text(r, routers) for r in results}
    out = df.copy()
    out["accept_len"] = pd.Series([texts.get(i) for i in out["id"]], index=out.index, dtype=object)
    return out


@dataclass
class Summary:
    """The page's key figures over a set of results."""

    runs: int = 0
    servers: int = 0
    configurations: int = 0
    baselines: int = 0
    newest: float | None = None
    by_server: dict[str, int] = field(default_factory=dict)


def summary(results: Iterable[BenchResult]) -> Summary:
    s = Summary()
    configs = set()
    for r in results:
        s.runs += 1
        s.by_server[server_of(r)] = s.by_server.get(server_of(r), 0) + 1
        configs.add(series_label(r))
        s.baselines += r.is_baseline
        w = when(r)
        if w is not None and (s.newest is None or w > s.newest):
            s.newest = w
    s.servers = len(s.by_server)
    s.configurations = len(configs)
    return s
