"""A CSV of hand-entered benchmark numbers.

The first line that is not blank and does not start with ``#`` is the header;
columns may come in any order and any may be left out, but every column must
be one of :data:`COLUMNS` (an unknown name is an error naming it, so a typo
never silently drops a figure).  A row needs ``output_tok_s`` or
``accept_len``.  Empty cells and ``N/A`` are missing values, never 0.

=====================  ==========================================================
column                 meaning
=====================  ==========================================================
server                 the server's name in the workspace
started_at             when the run started: ISO 8601 (no zone = UTC) or epoch seconds
label                  a free-text note
target_model           the target model
draft_model            the draft model
algorithm              EAGLE3, EAGLE, ... or NONE for a run without speculation
num_steps, topk,       --speculative-num-steps, --speculative-eagle-topk,
num_draft_tokens       --speculative-num-draft-tokens
cuda_graph             true/false (yes/no, 1/0, on/off)
tp                     tensor parallel size
sglang_version         e.g. 0.5.23
concurrency            clients in flight (bench_serving's --max-concurrency)
num_prompts            requests in the run
input_len, output_len  tokens per request
dataset                random, sharegpt, mt-bench, ...
request_rate           requests/s; inf (or empty) = all at once
output_tok_s           output tokens per second
total_tok_s            input + output tokens per second
request_s              requests per second
accept_len             accept length of this run
accept_len_lifetime    the server's lifetime average accept length
{ttft,tpot,itl,e2e}_{mean,median,p90,p95,p99}_ms   latency statistics in ms
completed              requests completed
duration_s             length of the run in seconds
=====================  ==========================================================
"""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone

from backend.bench.records import BenchImportError, Parsed, Problem, integer, num
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult, Percentiles

FORMAT = "csv"

_TEXT = ("server", "label", "target_model", "draft_model", "algorithm", "sglang_version", "dataset")
_INT = ("num_steps", "topk", "num_draft_tokens", "tp", "concurrency", "num_prompts", "input_len", "output_len",
        "completed")
_FLOAT = ("request_rate", "output_tok_s", "total_tok_s", "request_s", "accept_len", "accept_len_lifetime",
          "duration_s")
_LAT = tuple(f"{w}_{s}_ms" for w in ("ttft", "tpot", "itl", "e2e") for s in ("mean", "median", "p90", "p95", "p99"))
COLUMNS = ("started_at", "cuda_graph") + _TEXT + _INT + _FLOAT + _LAT
_TRUE = {"true", "yes", "1", "on", "y"}
_FALSE = {"false", "no", "0", "off", "n"}


def looks_like(text: str) -> bool:
    """A CSV whose header names at least one figure column Specdeck knows."""
    header = _header_line(text)
    if header is None:
        return False
    names = {c.strip().lower() for c in header[1].split(",")}
    return "output_tok_s" in names or "accept_len" in names


def _header_line(text: str) -> tuple[int, str] | None:
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            return n, line
    return None


def _time(value: str, field: str) -> float | None:
    v = value.strip()
    if not v:
        return None
    try:
        return float(v)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{field} is {value!r}: use ISO 8601 (2026-03-14T09:30:00Z) or epoch seconds") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _bool(value: str, field: str) -> bool | None:
    v = value.strip().lower()
    if not v or v in ("n/a", "na", "-"):
        return None
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{field} is {value!r}, not true/false")


def parse(text: str, path: str) -> Parsed:
    parsed = Parsed(FORMAT)
    found = _header_line(text)
    if found is None:
        raise BenchImportError(path, 1, "the CSV has no header line")
    header_no, _ = found
    rows = [(n, line) for n, line in enumerate(text.splitlines(), 1)
            if n >= header_no and line.strip() and not line.lstrip().startswith("#")]
    reader = csv.reader(io.StringIO("\n".join(line for _, line in rows)))
    records = list(reader)
    header = [h.strip().lower() for h in records[0]]
    for h in header:
        if h not in COLUMNS:
            raise BenchImportError(path, header_no, f"unknown column {h!r}; the columns are: {', '.join(COLUMNS)}",
                                   field=h)
    if "output_tok_s" not in header and "accept_len" not in header:
        raise BenchImportError(path, header_no, "the header needs an output_tok_s or an accept_len column")
    for (line_no, line), cells in zip(rows[1:], records[1:]):
        if len(cells) > len(header):
            parsed.problems.append(Problem(path, line_no, f"{len(cells)} cells for {len(header)} columns"))
            continue
        row = {h: (cells[i] if i < len(cells) else "") for i, h in enumerate(header)}
        try:
            parsed.results.append(_row(row, path, line_no, line))
        except _CellError as exc:
            parsed.problems.append(Problem(path, line_no, str(exc), field=exc.field))
    return parsed


class _CellError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _row(row: dict[str, str], path: str, line: int, raw: str) -> BenchResult:
    v: dict[str, object] = {}
    for key, cell in row.items():
        try:
            if key in _TEXT:
                v[key] = cell.strip() or None
            elif key in _INT:
                v[key] = integer(cell, field=key)
            elif key in _FLOAT or key in _LAT:
                v[key] = num(cell, field=key, allow_inf=key == "request_rate")
            elif key == "started_at":
                v[key] = _time(cell, key)
            elif key == "cuda_graph":
                v[key] = _bool(cell, key)
        except ValueError as exc:
            raise _CellError(key, str(exc)) from None
    if v.get("output_tok_s") is None and v.get("accept_len") is None:
        raise _CellError("output_tok_s", "a row needs output_tok_s or accept_len")

    def lat(which: str) -> Percentiles:
        return Percentiles(**{s: v.get(f"{which}_{s}_ms") for s in ("mean", "median", "p90", "p95", "p99")})

    return BenchResult(
        source=f"import:{FORMAT}",
        server=v.get("server"),
        label=v.get("label"),
        started_at=v.get("started_at"),
        config=BenchConfig(
            target_model=v.get("target_model"), draft_model=v.get("draft_model"), algorithm=v.get("algorithm"),
            num_steps=v.get("num_steps"), topk=v.get("topk"), num_draft_tokens=v.get("num_draft_tokens"),
            cuda_graph=v.get("cuda_graph"), tp=v.get("tp"), sglang_version=v.get("sglang_version"),
        ),
        load=BenchLoad(
            concurrency=v.get("concurrency"), num_prompts=v.get("num_prompts"), input_len=v.get("input_len"),
            output_len=v.get("output_len"), dataset=v.get("dataset"), request_rate=v.get("request_rate"),
        ),
        results=BenchFigures(
            output_tok_s=v.get("output_tok_s"), total_tok_s=v.get("total_tok_s"), request_s=v.get("request_s"),
            ttft_ms=lat("ttft"), tpot_ms=lat("tpot"), itl_ms=lat("itl"), e2e_ms=lat("e2e"),
            accept_len=v.get("accept_len"), accept_len_lifetime=v.get("accept_len_lifetime"),
            completed=v.get("completed"), duration_s=v.get("duration_s"),
        ),
        source_file=path, source_line=line, raw=raw,
    )
