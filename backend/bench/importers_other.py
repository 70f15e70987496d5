"""SGLang's ``bench_one_batch_server`` and ``bench_speculative``, and SpecForge's benchmarks.

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

SpecForge: ``specforge benchmark --output-json`` writes one object
(``backend, dataset, samples, output_tokens, latency_seconds,
throughput_tokens_per_second, average_acceptance_length,
spec_verify_count``) and prints ``Backend:``/``Dataset: D (N completed
prompts/turns)``/``Output throughput: X tok/s``/``Average acceptance
length: X``.  Its acceptance length is the unweighted mean over requests of
this run (not SGLang's pooled figure; reference/specforge.md).  The older
``benchmarks/bench_eagle3.py`` writes one indented JSON document
``{"model": DRAFT, BENCH: [{batch_size, steps, topk, num_draft_tokens,
metrics: [{latency, output_throughput, accept_length, ...}], num_samples}]}``;
each metrics entry is one result.
"""

from __future__ import annotations

import re

from backend.bench.importers_json import LDict
from backend.bench.records import Parsed, Problem, integer, num, positive
from specdeck_types.bench import NO_SPECULATION, BenchConfig, BenchFigures, BenchLoad, BenchResult, Percentiles

ONE_BATCH_JSONL = "one_batch_server_jsonl"
ONE_BATCH_REPORT = "one_batch_server_report"
ONE_BATCH_TABLE = "one_batch_server_table"
SPECULATIVE_JSONL = "bench_speculative_jsonl"
SPECFORGE_JSON = "specforge_json"
SPECFORGE_REPORT = "specforge_report"
SPECFORGE_EAGLE3 = "specforge_bench_eagle3"


def is_one_batch_record(d: dict) -> bool:
    return "batch_size" in d and "latency" in d and ("run_name" in d or "overall_throughput" in d)


def is_speculative_record(d: dict) -> bool:
    return "acc_length" in d and "step_time" in d and "speed" in d


def is_specforge_result(d: dict) -> bool:
    return "throughput_tokens_per_second" in d


def is_bench_eagle3_document(d: dict) -> bool:
    return any(isinstance(v, list) and v and isinstance(v[0], dict) and "metrics" in v[0] for v in d.values())


def _speculation(steps: int | None, algorithm: str) -> str | None:
    if steps is None:
        return None
    return NO_SPECULATION if steps == 0 else algorithm


# -- bench_one_batch_server ---------------------------------------------

def one_batch_from_record(d: dict, path: str, line: int, raw: str) -> BenchResult:
    bs = integer(d.get("batch_size"), field="batch_size")
    return BenchResult(
        source=f"import:{ONE_BATCH_JSONL}",
        load=BenchLoad(concurrency=bs, num_prompts=bs, input_len=integer(d.get("input_len"), field="input_len"),
                       output_len=integer(d.get("output_len"), field="output_len")),
        results=BenchFigures(
            output_tok_s=num(d.get("output_throughput"), field="output_throughput"),
            total_tok_s=num(d.get("overall_throughput"), field="overall_throughput"),
            accept_len_lifetime=positive(num(d.get("acc_length"), field="acc_length")),
            duration_s=num(d.get("latency"), field="latency"),
        ),
        label=d.get("run_name") if isinstance(d.get("run_name"), str) else None,
        source_file=path, source_line=line, raw=raw,
    )


_KV = re.compile(r"^\s*(?P<key>[a-zA-Z_][\w \-]*?)\s*:\s*(?P<value>-?[\d.]+|n/a|inf)\b(?P<rest>.*)$")
_WARMUP_BEGIN = re.compile(r"=+\s*Warmup Begin\s*=+")
_WARMUP_END = re.compile(r"=+\s*Warmup End\s*=+")


def parse_one_batch_report(text: str, path: str) -> Parsed:
    """The ``batch size: N`` ... blocks bench_one_batch_server prints, one per case."""
    parsed = Parsed(ONE_BATCH_REPORT)
    lines = text.splitlines()
    in_warmup = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _WARMUP_BEGIN.search(line):
            in_warmup = True
        elif _WARMUP_END.search(line):
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
                load=BenchLoad(concurrency=bs, num_prompts=bs,
                               input_len=integer(vals.get("input_len", (None,))[0], field="input_len"),
                               output_len=integer(vals.get("output_len", (None,))[0], field="output_len")),
                results=BenchFigures(
                    output_tok_s=v("output throughput"),
                    accept_len_lifetime=positive(v("acc_length", "accept length")),
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
                load=BenchLoad(concurrency=bs, num_prompts=bs,
                               input_len=integer(row.get("input_len"), field="input len"), output_len=output_len),
                results=BenchFigures(
                    output_tok_s=num(row.get("output_tok_s"), field="output throughput"),
                    itl_ms=Percentiles(mean=num(row.get("itl_ms"), field="ITL")),
                    accept_len_lifetime=positive(num(row.get("accept_len"), field="acc length")),
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
    acc = num(d.get("acc_length"), field="acc_length")
    return BenchResult(
        source=f"import:{SPECULATIVE_JSONL}",
        config=BenchConfig(
            algorithm=_speculation(steps, "EAGLE"),
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


# -- SpecForge --------------------------------------------------------------

def specforge_from_result(d: dict, path: str, line: int, raw: str, fmt: str = SPECFORGE_JSON) -> BenchResult:
    samples = integer(d.get("samples"), field="samples")
    return BenchResult(
        source=f"import:{fmt}",
        load=BenchLoad(num_prompts=samples, dataset=d.get("dataset") if isinstance(d.get("dataset"), str) else None),
        results=BenchFigures(
            output_tok_s=num(d.get("throughput_tokens_per_second"), field="throughput_tokens_per_second"),
            accept_len=positive(num(d.get("average_acceptance_length"), field="average_acceptance_length")),
            completed=samples,
            duration_s=num(d.get("latency_seconds"), field="latency_seconds"),
        ),
        source_file=path, source_line=line, raw=raw,
    )


_SF_DATASET = re.compile(r"^\s*Dataset:\s*(?P<ds>\S+)\s*\((?P<n>\d+) completed prompts/turns\)\s*$")
_SF_LINES = {
    "output throughput": ("throughput_tokens_per_second", re.compile(r"^\s*Output throughput:\s*(\S+)\s*tok/s")),
    "average acceptance length": ("average_acceptance_length",
                                  re.compile(r"^\s*Average acceptance length:\s*(\S+)")),
    "speculative verify count": ("spec_verify_count", re.compile(r"^\s*Speculative verify count:\s*(\S+)")),
}


def parse_specforge_report(text: str, path: str) -> Parsed:
    """What ``specforge benchmark`` prints: one block per run."""
    parsed = Parsed(SPECFORGE_REPORT)
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = _SF_DATASET.match(line)
        if not m:
            continue
        first = n - 1 if n > 0 and lines[n - 1].strip().lower().startswith("backend:") else n
        d: dict = {"dataset": m.group("ds"), "samples": m.group("n")}
        last = n
        for k in range(n + 1, min(n + 4, len(lines))):
            for key, rx in _SF_LINES.values():
                mm = rx.match(lines[k])
                if mm:
                    d[key] = mm.group(1)
                    last = k
        try:
            if "throughput_tokens_per_second" not in d:
                raise ValueError("no 'Output throughput: X tok/s' line after the Dataset line")
            parsed.results.append(specforge_from_result(d, path, first + 1, "\n".join(lines[first:last + 1]),
                                                        SPECFORGE_REPORT))
        except ValueError as exc:
            parsed.problems.append(Problem(path, n + 1, str(exc)))
    return parsed


def parse_bench_eagle3(doc: LDict, path: str, text_lines: list[str]) -> Parsed:
    """SpecForge's ``bench_eagle3.py`` results document."""
    parsed = Parsed(SPECFORGE_EAGLE3)
    draft = doc.get("model") if isinstance(doc.get("model"), str) else None
    for bench, runs in doc.items():
        if not isinstance(runs, list):
            continue
        for run in runs:
            if not isinstance(run, dict) or not isinstance(run.get("metrics"), list):
                continue
            for metrics in run["metrics"]:
                line = getattr(metrics, "line", getattr(run, "line", 1))
                try:
                    if not isinstance(metrics, dict):
                        raise ValueError("a metrics entry that is not an object")
                    steps = integer(run.get("steps"), field="steps")
                    bs = integer(run.get("batch_size"), field="batch_size")
                    n = integer(run.get("num_samples"), field="num_samples") or \
                        integer(metrics.get("num_questions"), field="num_questions")
                    parsed.results.append(BenchResult(
                        source=f"import:{SPECFORGE_EAGLE3}",
                        config=BenchConfig(
                            draft_model=draft if steps != 0 else None,
                            algorithm=_speculation(steps, "EAGLE3"),
                            num_steps=steps or None,
                            topk=integer(run.get("topk"), field="topk") or None,
                            num_draft_tokens=integer(run.get("num_draft_tokens"), field="num_draft_tokens") or None,
                        ),
                        load=BenchLoad(concurrency=bs, num_prompts=n, dataset=bench),
                        results=BenchFigures(
                            output_tok_s=num(metrics.get("output_throughput"), field="output_throughput"),
                            accept_len=positive(num(metrics.get("accept_length"), field="accept_length")),
                            duration_s=num(metrics.get("latency"), field="latency"),
                            completed=integer(metrics.get("num_questions"), field="num_questions"),
                        ),
                        source_file=path, source_line=line,
                        raw=_raw_object(text_lines, line),
                    ))
                except ValueError as exc:
                    parsed.problems.append(Problem(path, line, f"{bench}: {exc}"))
    return parsed


def _raw_object(lines: list[str], line: int) -> str:
    """The lines of the object that starts on ``line`` (by brace depth), for audit."""
    depth, out = 0, []
    for text in lines[line - 1:]:
        out.append(text)
        depth += text.count("{") - text.count("}")
        if depth <= 0:
            break
    return "\n".join(out)
