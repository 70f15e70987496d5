"""``sglang.bench_serving`` and ``vllm bench serve`` (``benchmark_serving.py``): their
JSON records and the reports they print.

The two tools print reports under the same banner ("Serving Benchmark Result")
with mostly the same labels, so each report is told apart by the lines only
one of them prints: vLLM's ``Maximum request concurrency:``, ``Failed
requests:``, ``Request rate configured (RPS):``, its ``Speculative Decoding``
section (``Acceptance length:``) and ``E2EL`` latencies; SGLang's
``Backend:``, ``Max request concurrency:`` (``Max reqeuest`` in old versions),
``Total generated tokens (retokenized):``, ``Concurrency:``, ``Accept
length:`` and ``E2E Latency``.  A report with lines of both, or of neither, is
imported with its tool left unknown (format ``serving_report``), never guessed.
vLLM's acceptance length is measured over the run from the server's counters,
so it is the run's accept length; SGLang's is the server's lifetime average.
vLLM's JSON (``--save-result``) is told from SGLang's JSONL by keys only it
writes (``model_id``, ``tokenizer_id``, ``burstiness``, ``*_e2el_ms``,
``spec_decode_*``).

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
number of prompts, dataset and lengths that the report itself lacks (vLLM
prints its own ``Namespace(...)`` too, with ``input_len``/``output_len``).

Labels and values are split with string operations, not backtracking
patterns, so a hostile line (200,000 ``=`` or spaces) costs linear time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from backend.bench.records import Parsed, Problem, integer, num, positive, sentinel_positive
from specdeck_types.server_info import ServerInfo
from specdeck_types.bench import (NO_SPECULATION, UNNAMED_SPECULATION, BenchConfig, BenchFigures, BenchLoad,
                                  BenchResult, Percentiles)

JSONL_FORMAT = "bench_serving_jsonl"
REPORT_FORMAT = "bench_serving_report"
VLLM_JSON_FORMAT = "vllm_bench_serve_json"
VLLM_REPORT_FORMAT = "vllm_bench_serve_report"
UNKNOWN_REPORT_FORMAT = "serving_report"  # the banner, but no line that only one tool prints

SGLANG_TOOL = "SGLang bench_serving"
VLLM_TOOL = "vLLM bench serve"

# keys that only bench_serving's records have (any one identifies a record)
JSONL_MARKERS = ("mean_ttft_ms", "median_e2e_latency_ms", "total_output_tokens_retokenized")
_VLLM_KEYS = ("model_id", "tokenizer_id", "burstiness", "endpoint_type", "total_token_throughput")
_SGLANG_KEYS = ("total_output_tokens_retokenized", "median_e2e_latency_ms", "mean_e2e_latency_ms", "server_info",
                "total_input_text_tokens", "accept_length")

_LATENCIES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e_latency": "e2e_ms", "e2el": "e2e_ms"}


def is_serving_record(d: dict) -> bool:
    return "output_throughput" in d and (any(k in d for k in JSONL_MARKERS) or "mean_e2el_ms" in d
                                         or ("model_id" in d and "request_throughput" in d))


def is_vllm_record(d: dict) -> bool:
    vllm = any(k in d for k in _VLLM_KEYS) or any(
        isinstance(k, str) and (k.endswith("_e2el_ms") or k.startswith("spec_decode_")) for k in d)
    return vllm and not any(k in d for k in _SGLANG_KEYS)


def config_from_server_info(info: Any) -> BenchConfig:
    """The configuration part of a result from a ``/server_info`` (or ``/get_server_info``) JSON."""
    if not isinstance(info, dict):
        return BenchConfig()
    si = ServerInfo.from_json(info)
    raw = si.raw if isinstance(si.raw, dict) else info
    disable = raw.get("disable_cuda_graph")
    tp = raw.get("tp_size")
    target = raw.get("served_model_name") or raw.get("model_path")
    return BenchConfig(
        target_model=target if isinstance(target, str) else None,
        draft_model=si.speculative_draft_model_path,
        # the server said: a missing algorithm there means no speculation
        algorithm=si.speculative_algorithm or NO_SPECULATION,
        num_steps=si.speculative_num_steps,
        topk=si.speculative_eagle_topk,
        num_draft_tokens=si.speculative_num_draft_tokens,
        cuda_graph=None if disable is None else not bool(disable),
        tp=integer(tp, field="server_info.tp_size") if isinstance(tp, (int, float)) and not isinstance(tp, bool)
        else None,
        sglang_version=si.version,
    )


def _request_rate(value: Any) -> float | None:
    if isinstance(value, str) and value.strip().lower() == "trace":
        return None  # replayed timestamps: no single rate
    return num(value, field="request_rate", allow_inf=True)


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v.strip() else None


def result_from_record(d: dict, path: str, line: int, raw: str) -> BenchResult:
    """One bench_serving (or vLLM) JSON record.  Raises ``ValueError`` naming the bad field."""
    if is_vllm_record(d):
        return _vllm_record(d, path, line, raw)

    def f(key: str, nan_ok: bool = False) -> float | None:
        return num(d.get(key), field=key, nan_ok=nan_ok)

    def pct(name: str) -> Percentiles:
        # bench_serving writes NaN for a statistic without a sample (ITL of one-token answers)
        return Percentiles(
            mean=f(f"mean_{name}_ms", True), median=f(f"median_{name}_ms", True),
            p90=f(f"p90_{name}_ms", True), p95=f(f"p95_{name}_ms", True), p99=f(f"p99_{name}_ms", True),
        )

    dataset = _text(d.get("dataset_name"))
    random_ds = bool(dataset and dataset.startswith("random"))
    output_len = integer(d.get("random_output_len"), field="random_output_len") if random_ds else \
        integer(d.get("sharegpt_output_len"), field="sharegpt_output_len")
    total = f("total_throughput")
    if total is None and f("output_throughput") is not None and f("input_throughput") is not None:
        total = f("input_throughput") + f("output_throughput")  # older versions print both parts only
    server_info = d.get("server_info")
    config = config_from_server_info(server_info)
    lifetime = sentinel_positive(d.get("accept_length"), field="accept_length")
    if config.algorithm is None and lifetime is not None and lifetime > 1:
        config = replace(config, algorithm=UNNAMED_SPECULATION)
    return BenchResult(
        source=f"import:{JSONL_FORMAT}",
        tool=SGLANG_TOOL,
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
            accept_len_lifetime=lifetime,
            completed=integer(d.get("completed"), field="completed"),
            duration_s=f("duration"),
        ),
        label=_text(d.get("tag")),
        source_file=path, source_line=line, raw=raw,
    )


def _vllm_record(d: dict, path: str, line: int, raw: str) -> BenchResult:
    def f(key: str, nan_ok: bool = False) -> float | None:
        return num(d.get(key), field=key, nan_ok=nan_ok)

    def pct(name: str) -> Percentiles:
        return Percentiles(mean=f(f"mean_{name}_ms", True), median=f(f"median_{name}_ms", True),
                           p90=f(f"p90_{name}_ms", True), p95=f(f"p95_{name}_ms", True),
                           p99=f(f"p99_{name}_ms", True))

    acc = sentinel_positive(d.get("spec_decode_acceptance_length"), field="spec_decode_acceptance_length")
    dataset = _text(d.get("dataset_name"))  # only with --metadata dataset_name=...
    return BenchResult(
        source=f"import:{VLLM_JSON_FORMAT}",
        tool=VLLM_TOOL,
        config=BenchConfig(target_model=_text(d.get("model_id")),
                           algorithm=UNNAMED_SPECULATION if acc is not None else None),
        load=BenchLoad(
            concurrency=integer(d.get("max_concurrency"), field="max_concurrency"),
            num_prompts=integer(d.get("num_prompts"), field="num_prompts"),
            input_len=integer(d.get("random_input_len", d.get("input_len")), field="input_len"),
            output_len=integer(d.get("random_output_len", d.get("output_len")), field="output_len"),
            dataset=dataset,
            request_rate=_request_rate(d.get("request_rate")),
        ),
        results=BenchFigures(
            output_tok_s=f("output_throughput"),
            total_tok_s=f("total_token_throughput"),
            request_s=f("request_throughput"),
            ttft_ms=pct("ttft"), tpot_ms=pct("tpot"), itl_ms=pct("itl"), e2e_ms=pct("e2el"),
            accept_len=acc,
            completed=integer(d.get("completed"), field="completed"),
            duration_s=f("duration"),
        ),
        label=_text(d.get("label")),
        source_file=path, source_line=line, raw=raw,
    )


# -- the printed report ---------------------------------------------------

_LABELS = {
    "backend": "backend",
    "traffic request rate": "request_rate",
    "request rate configured (rps)": "request_rate",
    "max request concurrency": "concurrency",
    "max reqeuest concurrency": "concurrency",
    "maximum request concurrency": "concurrency",
    "successful requests": "completed",
    "benchmark duration (s)": "duration_s",
    "request throughput (req/s)": "request_s",
    "input token throughput (tok/s)": "input_tok_s",
    "output token throughput (tok/s)": "output_tok_s",
    "total token throughput (tok/s)": "total_tok_s",
    "accept length": "accept_len",
    "acceptance length": "acceptance_len",
}
_SGLANG_LABELS = {"backend", "max request concurrency", "max reqeuest concurrency", "concurrency", "accept length",
                  "total generated tokens (retokenized)", "total input text tokens", "total input vision tokens",
                  "input token throughput (tok/s)"}
_VLLM_LABELS = {"maximum request concurrency", "failed requests", "request rate configured (rps)",
                "acceptance length", "acceptance rate (%)", "drafts", "draft tokens", "accepted tokens",
                "request goodput (req/s)", "burstiness factor"}
_PCT_STATS = {"mean": "mean", "median": "median", "p90": "p90", "p95": "p95", "p99": "p99"}
_PCT_NAMES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e latency": "e2e_ms", "e2el": "e2e_ms"}
_PRE_BANNER = {"traffic request rate", "burstiness factor", "maximum request concurrency"}


def _norm(label: str) -> str:
    return " ".join(label.lower().split())


def _pct(label: str) -> tuple[str, str] | None:
    """``("p99", "ttft_ms")`` for "P99 TTFT (ms)"; None for any other label."""
    if not label.endswith(" (ms)"):
        return None
    stat, _, name = label[:-5].partition(" ")
    if stat in _PCT_STATS and name in _PCT_NAMES:
        return _PCT_STATS[stat], _PCT_NAMES[name]
    return None


def split_label(line: str) -> tuple[str, str] | None:
    """``("output token throughput (tok/s)", "123.4")`` for a ``Label: value`` line (normalised label,
    stripped value); None for a line that is not one.  String operations only: linear in the line."""
    label, sep, value = line.partition(":")
    if not sep:
        return None
    label = label.strip()
    value = value.strip()
    if not label or not value or not label[0].isalpha():
        return None
    return _norm(label), value


def _is_section(line: str) -> bool:
    """A heading between sections ("----Time to First Token----", "Per-position acceptance (%):")."""
    s = line.strip().strip("-").strip().rstrip(":")
    return bool(s) and len(s) < 80 and s[0].isalpha() and all(c.isalnum() or c in " ().-%/" for c in s)


def _is_end(line: str) -> bool:
    s = line.strip()
    return len(s) >= 10 and s.count("=") == len(s)


def _is_banner(line: str) -> bool:
    return "serving benchmark result" in line.lower()


def namespace_args(line: str) -> dict[str, str]:
    """The ``key=value`` items of an argparse ``Namespace(...)`` dump (a hand-written scanner: linear)."""
    at = line.find("Namespace(")
    if at < 0:
        return {}
    body = line[at + len("Namespace("):]
    out: dict[str, str] = {}
    i, n = 0, len(body)
    while i < n:
        while i < n and body[i] in " ,":
            i += 1
        j = i
        while j < n and (body[j].isalnum() or body[j] == "_"):
            j += 1
        if j == i or j >= n or body[j] != "=":
            # not a key: skip to the next top-level comma
            depth = 0
            while j < n and not (body[j] == "," and depth == 0):
                if body[j] in "([{":
                    depth += 1
                elif body[j] in ")]}":
                    depth -= 1
                    if depth < 0:
                        return out
                j += 1
            i = j
            continue
        key = body[i:j]
        j += 1
        if j < n and body[j] in "'\"":
            q = body[j]
            k = j + 1
            while k < n and body[k] != q:
                k += 2 if body[k] == "\\" else 1
            value = body[j + 1:min(k, n)]
            j = k + 1
        else:
            k = j
            depth = 0
            while k < n and not (body[k] in ",)" and depth == 0):
                if body[k] in "([{":
                    depth += 1
                elif body[k] in ")]}":
                    depth -= 1
                k += 1
            value = body[j:k].strip()
            j = k
            if value == "None":
                i = j
                continue
        out[key] = value
        i = j
    return out


def _vllm_namespace(args: dict[str, str]) -> bool:
    return "bench_type" in args or "burstiness" in args or "endpoint_type" in args or "subparser" in args


class _FieldError(ValueError):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


def parse_report(text: str, path: str, context=None) -> Parsed:
    """Every bench_serving / vllm bench serve report in ``text`` (a console log, a paste).
    ``context(line)`` gives the server configuration a command line above that line showed."""
    parsed = Parsed(REPORT_FORMAT)
    lines = text.splitlines()
    args: dict[str, str] = {}
    pre: dict[str, tuple[str, int]] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if "Namespace(" in line:
            args = namespace_args(line) or args
        if not _is_banner(line):
            kv = split_label(line)
            if kv and kv[0] in _PRE_BANNER:
                pre[kv[0]] = (kv[1], i + 1)  # older vLLM prints these above the banner
            i += 1
            continue
        start = i + 1  # 1-based line of the banner
        fields: dict[str, tuple[str, int]] = {}
        j = i + 1
        while j < len(lines):
            cur = lines[j]
            if _is_end(cur) or _is_banner(cur):
                break
            kv = split_label(cur)
            if kv:
                fields.setdefault(kv[0], (kv[1], j + 1))
            elif cur.strip() and not _is_section(cur):
                break  # the report ended without its closing line
            j += 1
        for k, v in pre.items():
            fields.setdefault(k, v)
        try:
            parsed.results.append(_report_result(fields, args, path, start, "\n".join(lines[i:j + 1]),
                                                 context(start) if context else None))
        except ValueError as exc:
            where = getattr(exc, "line", start)
            parsed.problems.append(Problem(path, where, str(exc)))
        args, pre = {}, {}
        i = j if j > i else i + 1
    return parsed


def _tool(fields: dict[str, tuple[str, int]], args: dict[str, str]) -> str | None:
    names = set(fields)
    vllm = bool(names & _VLLM_LABELS) or any(n.endswith("e2el (ms)") for n in names) or _vllm_namespace(args)
    sglang = bool(names & _SGLANG_LABELS) or any(n.endswith("e2e latency (ms)") for n in names)
    if vllm and not sglang:
        return VLLM_TOOL
    if sglang and not vllm:
        return SGLANG_TOOL
    return None


def _report_result(fields: dict[str, tuple[str, int]], args: dict[str, str], path: str, line: int,
                   raw: str, server: BenchConfig | None) -> BenchResult:
    tool = _tool(fields, args)
    values: dict[str, float | None] = {}
    pct: dict[str, dict[str, float | None]] = {v: {} for v in set(_PCT_NAMES.values())}
    for label, (value, at) in fields.items():
        key = _LABELS.get(label)
        m = _pct(label)
        try:
            if key == "backend":
                continue
            if key == "request_rate":
                values[key] = _request_rate(value)
            elif key == "concurrency":
                values[key] = None if value.lower() in ("not set", "none", "inf") else \
                    integer(value.split()[0], field=label)
            elif key is not None:
                values[key] = num(value.split()[0] if key == "completed" else value, field=label,
                                  sentinel=key in ("accept_len", "acceptance_len"))
            elif m:
                pct[m[1]][m[0]] = num(value, field=label, nan_ok=True)
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

    def arg_int(*names: str) -> int | None:
        for name in names:
            try:
                v = integer(args.get(name), field=name)
            except ValueError:
                v = None
            if v is not None:
                return v
        return None

    completed = values.get("completed")
    run_acc = positive(values.get("acceptance_len"))  # vLLM: this run's, from the server's counters
    lifetime = positive(values.get("accept_len"))  # SGLang: the server's lifetime average; 0 = no reading
    config = server or BenchConfig()
    target = args.get("model") or None
    if target and not config.target_model:
        config = replace(config, target_model=target)
    # vLLM prints its "Speculative Decoding" section only for a server with speculation
    vllm_spec = tool == VLLM_TOOL and any(_norm(x.strip().strip("-")) == "speculative decoding"
                                          for x in raw.splitlines())
    if config.algorithm is None and ((run_acc or 0) > 1 or (lifetime or 0) > 1 or vllm_spec):
        config = replace(config, algorithm=UNNAMED_SPECULATION)
    fmt = REPORT_FORMAT if tool == SGLANG_TOOL else VLLM_REPORT_FORMAT if tool == VLLM_TOOL \
        else UNKNOWN_REPORT_FORMAT
    out_len = arg_int("output_len", "random_output_len") if random_ds else \
        arg_int("output_len", "sharegpt_output_len") if tool == VLLM_TOOL else arg_int("sharegpt_output_len")
    return BenchResult(
        source=f"import:{fmt}",
        tool=tool,
        config=config,
        load=BenchLoad(
            concurrency=int(values["concurrency"]) if values.get("concurrency") is not None else None,
            num_prompts=arg_int("num_prompts"),
            input_len=(arg_int("input_len", "random_input_len") if tool == VLLM_TOOL
                       else arg_int("random_input_len")) if random_ds else None,
            output_len=out_len,
            dataset=dataset,
            request_rate=values.get("request_rate"),
        ),
        results=BenchFigures(
            output_tok_s=values.get("output_tok_s"),
            total_tok_s=total,
            request_s=values.get("request_s"),
            ttft_ms=Percentiles(**pct["ttft_ms"]), tpot_ms=Percentiles(**pct["tpot_ms"]),
            itl_ms=Percentiles(**pct["itl_ms"]), e2e_ms=Percentiles(**pct["e2e_ms"]),
            accept_len=run_acc,
            accept_len_lifetime=lifetime,
            completed=int(completed) if completed is not None else None,
            duration_s=values.get("duration_s"),
        ),
        label=args.get("tag") or args.get("label") or None,
        source_file=path, source_line=line, raw=raw,
    )
