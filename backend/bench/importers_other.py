"""SGLang's ``bench_one_batch_server`` and ``bench_speculative``.

``bench_one_batch_server`` (``sglang.bench_one_batch_server``; in 0.5.23
``sglang.benchmark.one_batch_server``) writes one JSONL record per case
(``run_name, batch_size, input_len, output_len, latency, output_throughput,
overall_throughput, last_gen_throughput``; 0.5.23 adds ``input_throughput,
last_ttft, acc_length, total_output_tokens, ...``), prints each case as
``key: value`` lines (also for the warm-up, which is skipped here), and with
``--show-report`` a markdown table.  ``acc_length`` is read from
``/server_info`` (lifetime, -1 when none).  The table repeats the printed
cases, so it is read only from files with no printed cases.

``scripts/playground/bench_speculative.py`` appends ``batch_size, steps,
topk, num_draft_tokens, acc_length, step_time, speed, completion_tokens``;
it relaunches the server per case with ``--speculative-algorithm EAGLE``
(``steps == 0``: no speculation).  ``speed`` is one sequence's decode speed
(``acc_length / step_time``, from the 20th-percentile step time); the batch
decodes ``batch_size`` sequences per step, so its output throughput is
``speed * batch_size``.

SpecForge's own benchmarks are read by :mod:`backend.bench.importers_specforge`.
"""

from __future__ import annotations

import re

from backend.bench.records import Parsed, Problem, integer, num, sentinel_positive
from specdeck_types.bench import (NO_SPECULATION, UNNAMED_SPECULATION, BenchConfig, BenchFigures, BenchLoad,
                                  BenchResult, Percentiles)

ONE_BATCH_JSONL = "one_batch_server_jsonl"
ONE_BATCH_REPORT = "one_batch_server_report"
ONE_BATCH_TABLE = "one_batch_server_table"
SPECULATIVE_JSONL = "bench_speculative_jsonl"
ONE_BATCH_TOOL = "SGLang bench_one_batch_server"
SPECULATIVE_TOOL = "SGLang bench_speculative (or SpecForge's copy of it)"
def is_one_batch_record(d: dict) -> bool:
    return "batch_size" in d and "latency" in d and ("run_name" in d or "overall_throughput" in d)


def is_speculative_record(d: dict) -> bool:
    return "acc_length" in d and "step_time" in d and "speed" in d


def speculation_of(steps: int | None, algorithm: str, accept_len: float | None = None) -> str | None:
    """The algorithm a record shows: none for steps 0, ``algorithm`` for more; with no steps
    (a server the script did not launch), speculation only where the accept length shows it."""
    if steps is None:
        return UNNAMED_SPECULATION if accept_len is not None and accept_len > 1 else None
    return NO_SPECULATION if steps == 0 else algorithm


# -- bench_one_batch_server ---------------------------------------------

def one_batch_from_record(d: dict, path: str, line: int, raw: str) -> BenchResult:
    bs = integer(d.get("batch_size"), field="batch_size")
    return BenchResult(
        source=f"import:{ONE_BATCH_JSONL}",
        tool=ONE_BATCH_TOOL,
        load=BenchLoad(concurrency=bs, num_prompts=bs, input_len=integer(d.get("input_len"), field="input_len"),
                       output_len=integer(d.get("output_len"), field="output_len")),
        results=BenchFigures(
            output_tok_s=num(d.get("output_throughput"), field="output_throughput"),
            total_tok_s=num(d.get("overall_throughput"), field="overall_throughput"),
            accept_len_lifetime=sentinel_positive(d.get("acc_length"), field="acc_length"),
            duration_s=num(d.get("latency"), field="latency"),
        ),
        label=d.get("run_name") if isinstance(d.get("run_name"), str) else None,
        source_file=path, source_line=line, raw=raw,
    )


_KEY = re.compile(r"[a-zA-Z_][\w \-]*")
_VALUE = re.compile(r"-?[\d.]+|n/a|inf")


class _KV:
    """``key: value`` of a printed case line (string operations and anchored full matches: linear)."""

    def __init__(self, key: str, value: str):
        self._key, self._value = key, value

    def group(self, name: str) -> str:
        return self._key if name == "key" else self._value

    @staticmethod
    def match(line: str) -> "_KV | None":
        key, sep, rest = line.partition(":")
        if not sep:
            return None
        key = key.strip()
        token = rest.split(None, 1)[0] if rest.strip() else ""
        if len(key) > 200 or len(token) > 64 or not _KEY.fullmatch(key):
            return None
        m = _VALUE.match(token)
        if not m or (m.end() < len(token) and (token[m.end()].isalnum() or token[m.end()] == "_")):
            return None
        return _KV(key, m.group(0))


def _warmup(line: str, which: str) -> bool:
    return f"Warmup {which}" in line and "=" in line


def parse_one_batch_report(text: str, path: str) -> Parsed:
    """The ``batch size: N`` ... blocks bench_one_batch_server prints, one per case."""
    parsed = Parsed(ONE_BATCH_REPORT)
    lines = text.splitlines()
    in_warmup = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _warmup(line, "Begin"):
            in_warmup = True
        elif _warmup(line, "End"):
            in_warmup = False
        m = _KV.match(line)
        if not (m and m.group("key").strip().lower() == "batch size"):
            i += 1
            continue
        start, vals = i + 1, {}
        j = i
        while j < len(lines):
            mm = _KV.match(lines[j])
            if not mm or (j > i and mm.group("key").strip().lower() == "batch size"):
                break
            vals[mm.group("key").strip().lower()] = (mm.group("value"), j + 1)
            j += 1
        i = j
        if in_warmup:
            continue
        raw = "\n".join(lines[start - 1:j])
        try:
            def v(*keys: str) -> float | None:
                for k in keys:
                    if k in vals:
                        return num(vals[k][0], field=k)
                return None

            bs = integer(vals["batch size"][0], field="batch size")
            if v("latency") is None:
                raise ValueError("latency is missing")
            parsed.results.append(BenchResult(
                source=f"import:{ONE_BATCH_REPORT}",
                tool=ONE_BATCH_TOOL,
                load=BenchLoad(concurrency=bs, num_prompts=bs,
                               input_len=integer(vals.get("input_len", (None,))[0], field="input_len"),
                               output_len=integer(vals.get("output_len", (None,))[0], field="output_len")),
                results=BenchFigures(
                    output_tok_s=v("output throughput"),
                    accept_len_lifetime=sentinel_positive(
                        vals.get("acc_length", vals.get("accept length", (None, 0)))[0], field="acc_length"),
                    duration_s=v("latency"),
                ),
                source_file=path, source_line=start, raw=raw,
            ))
        except ValueError as exc:
            parsed.problems.append(Problem(path, start, str(exc)))
    return parsed


_LENS = re.compile(r"Input lens:\s*\[([^\]]*)\]\.\s*Output lens:\s*\[([^\]]*)\]")


def _column(header: str) -> str | None:
    h = header.strip().lower()
    if h in ("bs", "batch size", "batch_size"):
        return "bs"
    if h.startswith("input len") or h == "input_len":
        return "input_len"
    if h.startswith("latency"):
        return "latency"
    if h.startswith("input thr"):
        return "input_tok_s"
    if h.startswith("output thr"):
        return "output_tok_s"
    if h.startswith("acc"):
        return "accept_len"
    if h.startswith("itl"):
        return "itl_ms"
    return None


def parse_one_batch_table(text: str, path: str) -> Parsed:
    """The markdown table of ``--show-report``; rows are cases."""
    parsed = Parsed(ONE_BATCH_TABLE)
    lines = text.splitlines()
    output_len: int | None = None
    cols: list[str | None] | None = None
    for n, line in enumerate(lines, 1):
        lens = _LENS.search(line)
        if lens:
            outs = [x.strip() for x in lens.group(2).split(",") if x.strip()]
            output_len = int(outs[0]) if len(outs) == 1 and outs[0].isdigit() else None
            cols = None
            continue
        s = line.strip()
        if not (s.startswith("|") and s.endswith("|")):
            cols = None
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if cols is None:
            named = [_column(c) for c in cells]
            if "bs" in named and "latency" in named:
                cols = named
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the |---|---| row
        row = {k: c for k, c in zip(cols, cells) if k}
        try:
            bs = integer(row.get("bs"), field="batch size")
            parsed.results.append(BenchResult(
                source=f"import:{ONE_BATCH_TABLE}",
                tool=ONE_BATCH_TOOL,
                load=BenchLoad(concurrency=bs, num_prompts=bs,
                               input_len=integer(row.get("input_len"), field="input len"), output_len=output_len),
                results=BenchFigures(
                    output_tok_s=num(row.get("output_tok_s"), field="output throughput"),
                    itl_ms=Percentiles(mean=num(row.get("itl_ms"), field="ITL")),
                    accept_len_lifetime=sentinel_positive(row.get("accept_len"), field="acc length"),
                    duration_s=num(row.get("latency"), field="latency"),
                ),
                source_file=path, source_line=n, raw=line,
            ))
        except ValueError as exc:
            parsed.problems.append(Problem(path, n, str(exc)))
    return parsed


# -- bench_speculative ----------------------------------------------------

def speculative_from_record(d: dict, path: str, line: int, raw: str) -> BenchResult:
    bs = integer(d.get("batch_size"), field="batch_size")
    steps = integer(d.get("steps"), field="steps")
    speed = num(d.get("speed"), field="speed")
    acc = sentinel_positive(d.get("acc_length"), field="acc_length")
    return BenchResult(
        source=f"import:{SPECULATIVE_JSONL}",
        tool=SPECULATIVE_TOOL,
        config=BenchConfig(
            algorithm=speculation_of(steps, "EAGLE", acc),
            num_steps=steps or None,
            topk=integer(d.get("topk"), field="topk") or None,
            num_draft_tokens=integer(d.get("num_draft_tokens"), field="num_draft_tokens") or None,
        ),
        load=BenchLoad(concurrency=bs, dataset="custom"),
        results=BenchFigures(
            output_tok_s=speed * bs if speed is not None and bs is not None else None,
            accept_len_lifetime=acc if steps else None,
        ),
        source_file=path, source_line=line, raw=raw,
    )
