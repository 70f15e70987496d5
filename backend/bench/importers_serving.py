"""``sglang.bench_serving``: its JSONL records and the report it prints.

JSONL (``--output-file``, one record per run, appended), keyed by name, never
by position.  What changed across versions (reference/sglang.md §5):

* 0.4.6: no ``total_input_text_tokens``/``total_input_vision_tokens``, no
  ``total_throughput``, no ``p90_*``/``p95_*`` except ``p95_itl_ms``;
* 0.5.4: the text/vision token counts;
* 0.5.23: ``tag``, ``server_info`` (the whole ``/server_info`` JSON),
  ``total_throughput``, ``p90_*``/``p95_*`` for every latency,
  ``max_output_tokens_per_s``, ``max_concurrent_requests``.

``request_rate`` is ``Infinity`` when unset (``json.dumps(float('inf'))``),
or ``"trace"``.  ``accept_length`` is the server's *lifetime* average read
after the run, so it is stored as ``accept_len_lifetime``; the run's own
accept length is not in the file.

The printed report ("==== Serving Benchmark Result ====" ... "=====") is
read by label.  Labels, sections and optional lines differ by version
(``Max reqeuest concurrency:`` with its old typo, ``Backend:`` absent in
some, ``Inter-token``/``Inter-Token``, ``Accept length:`` only when the
server has one, P90/P95 lines only in newer ones), and a pasted report may
have lost its padding.  A ``nohup.out`` holds as many reports as runs; the
argument dump SGLang prints before each run (``Namespace(...)``) gives the
number of prompts, dataset and lengths that the report itself lacks.
"""

from __future__ import annotations

import math
import re
from typing import Any

from backend.bench.records import Parsed, Problem, integer, num, positive
from specdeck_types.server_info import ServerInfo
from specdeck_types.bench import NO_SPECULATION, BenchConfig, BenchFigures, BenchLoad, BenchResult, Percentiles

JSONL_FORMAT = "bench_serving_jsonl"
REPORT_FORMAT = "bench_serving_report"

# keys that only bench_serving's records have (any one identifies a record)
JSONL_MARKERS = ("mean_ttft_ms", "median_e2e_latency_ms", "total_output_tokens_retokenized")

_LATENCIES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e_latency": "e2e_ms"}


def is_serving_record(d: dict) -> bool:
    return "output_throughput" in d and any(k in d for k in JSONL_MARKERS)


def config_from_server_info(info: Any) -> BenchConfig:
    """The configuration part of a result from a ``/server_info`` (or ``/get_server_info``) JSON."""
    if not isinstance(info, dict):
        return BenchConfig()
    si = ServerInfo.from_json(info)
    raw = si.raw if isinstance(si.raw, dict) else info
    disable = raw.get("disable_cuda_graph")
    tp = raw.get("tp_size")
    return BenchConfig(
        target_model=raw.get("served_model_name") or raw.get("model_path"),
        draft_model=si.speculative_draft_model_path,
        # the server said: a missing algorithm there means no speculation
        algorithm=si.speculative_algorithm or NO_SPECULATION,
        num_steps=si.speculative_num_steps,
        topk=si.speculative_eagle_topk,
        num_draft_tokens=si.speculative_num_draft_tokens,
        cuda_graph=None if disable is None else not bool(disable),
        tp=int(tp) if isinstance(tp, (int, float)) and not isinstance(tp, bool) else None,
        sglang_version=si.version,
    )


def _request_rate(value: Any) -> float | None:
    if isinstance(value, str) and value.strip().lower() == "trace":
        return None  # replayed timestamps: no single rate
    return num(value, field="request_rate")


def result_from_record(d: dict, path: str, line: int, raw: str) -> BenchResult:
    """One bench_serving JSONL record.  Raises ``ValueError`` naming the bad field."""

    def f(key: str) -> float | None:
        return num(d.get(key), field=key)

    def pct(name: str) -> Percentiles:
        return Percentiles(
            mean=f(f"mean_{name}_ms"), median=f(f"median_{name}_ms"),
            p90=f(f"p90_{name}_ms"), p95=f(f"p95_{name}_ms"), p99=f(f"p99_{name}_ms"),
        )

    dataset = d.get("dataset_name")
    random_ds = isinstance(dataset, str) and dataset.startswith("random")
    output_len = integer(d.get("random_output_len"), field="random_output_len") if random_ds else \
        integer(d.get("sharegpt_output_len"), field="sharegpt_output_len")
    total = f("total_throughput")
    if total is None and f("output_throughput") is not None and f("input_throughput") is not None:
        total = f("input_throughput") + f("output_throughput")  # older versions print both parts only
    server_info = d.get("server_info")
    config = config_from_server_info(server_info)
    return BenchResult(
        source=f"import:{JSONL_FORMAT}",
        config=config,
        load=BenchLoad(
            concurrency=integer(d.get("max_concurrency"), field="max_concurrency"),
            num_prompts=None,
            input_len=integer(d.get("random_input_len"), field="random_input_len") if random_ds else None,
            output_len=output_len,
            dataset=dataset,
            request_rate=_request_rate(d.get("request_rate")),
        ),
        results=BenchFigures(
            output_tok_s=f("output_throughput"),
            total_tok_s=total,
            request_s=f("request_throughput"),
            ttft_ms=pct("ttft"), tpot_ms=pct("tpot"), itl_ms=pct("itl"), e2e_ms=pct("e2e_latency"),
            accept_len=None,
            accept_len_lifetime=positive(f("accept_length")),
            completed=integer(d.get("completed"), field="completed"),
            duration_s=f("duration"),
        ),
        label=d.get("tag") if isinstance(d.get("tag"), str) else None,
        source_file=path, source_line=line, raw=raw,
    )


# -- the printed report ---------------------------------------------------

_BANNER = re.compile(r"serving benchmark result", re.I)
_END = re.compile(r"^\s*={10,}\s*$")
_LABELED = re.compile(r"^\s*(?P<label>[A-Za-z][^:]*?)\s*:\s*(?P<value>\S.*?)\s*$")
_SECTION = re.compile(r"^\s*-*\s*[A-Za-z][A-Za-z0-9 ().\-]*?\s*-*\s*$")
_PCT = re.compile(r"^(mean|median|p90|p95|p99) (ttft|tpot|itl|e2e latency) \(ms\)$")
_NAMESPACE = re.compile(r"Namespace\((?P<body>.*)\)\s*$")
_NS_ITEM = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,()\[\]{}]+)")

_LABELS = {
    "backend": "backend",
    "traffic request rate": "request_rate",
    "max request concurrency": "concurrency",
    "max reqeuest concurrency": "concurrency",
    "successful requests": "completed",
    "benchmark duration (s)": "duration_s",
    "request throughput (req/s)": "request_s",
    "input token throughput (tok/s)": "input_tok_s",
    "output token throughput (tok/s)": "output_tok_s",
    "total token throughput (tok/s)": "total_tok_s",
    "accept length": "accept_len",
}


def _norm(label: str) -> str:
    return re.sub(r"\s+", " ", label.strip().lower())


def _namespace(line: str) -> dict[str, str]:
    m = _NAMESPACE.search(line)
    if not m:
        return {}
    out = {}
    for key, value in _NS_ITEM.findall(m.group("body")):
        value = value.strip()
        if value[:1] in "'\"":
            value = value[1:-1]
        elif value == "None":
            continue  # an argument left unset
        out[key] = value
    return out


def parse_report(text: str, path: str) -> Parsed:
    """Every bench_serving report in ``text`` (a console log, a paste)."""
    parsed = Parsed(REPORT_FORMAT)
    lines = text.splitlines()
    args: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if "Namespace(" in line:
            args = _namespace(line) or args
        if not _BANNER.search(line):
            i += 1
            continue
        start = i + 1  # 1-based line of the banner
        fields: dict[str, tuple[str, int]] = {}
        j = i + 1
        while j < len(lines):
            cur = lines[j]
            if _END.match(cur) or _BANNER.search(cur):
                break
            m = _LABELED.match(cur)
            if m:
                fields.setdefault(_norm(m.group("label")), (m.group("value"), j + 1))
            elif cur.strip() and not _SECTION.match(cur):
                break  # the report ended without its closing line
            j += 1
        try:
            parsed.results.append(_report_result(fields, args, path, start, "\n".join(lines[i:j + 1])))
        except ValueError as exc:
            where = getattr(exc, "line", start)
            parsed.problems.append(Problem(path, where, str(exc)))
        args = {}
        i = j if j > i else i + 1
    return parsed


class _FieldError(ValueError):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


def _report_result(fields: dict[str, tuple[str, int]], args: dict[str, str], path: str, line: int,
                   raw: str) -> BenchResult:
    values: dict[str, float | None] = {}
    pct: dict[str, dict[str, float | None]] = {v: {} for v in _LATENCIES.values()}
    for label, (value, at) in fields.items():
        key = _LABELS.get(label)
        m = _PCT.match(label)
        try:
            if key == "backend":
                continue
            if key == "request_rate":
                values[key] = _request_rate(value)
            elif key is not None:
                values[key] = num(value, field=label)
            elif m:
                stat, which = m.group(1), m.group(2).replace(" ", "_")
                pct[_LATENCIES[which]]["median" if stat == "median" else stat] = num(value, field=label)
        except ValueError as exc:
            raise _FieldError(at, str(exc)) from None
    if values.get("output_tok_s") is None and values.get("request_s") is None:
        raise _FieldError(line, "a Serving Benchmark Result block without 'Output token throughput (tok/s)'"
                                " or 'Request throughput (req/s)'")
    total = values.get("total_tok_s")
    if total is None and values.get("output_tok_s") is not None and values.get("input_tok_s") is not None:
        total = values["input_tok_s"] + values["output_tok_s"]
    dataset = args.get("dataset_name")
    random_ds = bool(dataset and dataset.startswith("random"))

    def arg_int(name: str) -> int | None:
        try:
            return integer(args.get(name), field=name)
        except ValueError:
            return None

    conc = values.get("concurrency")
    completed = values.get("completed")
    return BenchResult(
        source=f"import:{REPORT_FORMAT}",
        config=BenchConfig(target_model=args.get("model") or None),
        load=BenchLoad(
            concurrency=int(conc) if conc is not None and not math.isinf(conc) else None,
            num_prompts=arg_int("num_prompts"),
            input_len=arg_int("random_input_len") if random_ds else None,
            output_len=arg_int("random_output_len") if random_ds else arg_int("sharegpt_output_len"),
            dataset=dataset,
            request_rate=values.get("request_rate"),
        ),
        results=BenchFigures(
            output_tok_s=values.get("output_tok_s"),
            total_tok_s=total,
            request_s=values.get("request_s"),
            ttft_ms=Percentiles(**pct["ttft_ms"]), tpot_ms=Percentiles(**pct["tpot_ms"]),
            itl_ms=Percentiles(**pct["itl_ms"]), e2e_ms=Percentiles(**pct["e2e_ms"]),
            accept_len=None,
            accept_len_lifetime=positive(values.get("accept_len")),
            completed=int(completed) if completed is not None else None,
            duration_s=values.get("duration_s"),
        ),
        label=args.get("tag") or None,
        source_file=path, source_line=line, raw=raw,
    )
