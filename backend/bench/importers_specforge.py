"""SpecForge's benchmarks.

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
each metrics entry is one result; ``steps`` 0 is a run without speculation,
``null`` (``--skip-launch-server``) a server the script did not launch.

SpecForge's ``benchmarks/bench_model_speedup.py`` (2025-10 to 2025-11) appended
JSONL records ``{batch_size, steps, topk, num_draft_tokens, acc_length,
duration, throughput, completion_tokens, benchmark}`` (``steps`` 0: no
speculation; ``throughput`` is the batch's output tok/s) and, with
``--skip-launch-server``, printed ``bs=8:bench_name='mtbench'
completion_tokens=N acc_length=X duration=Ys throughput=Z token/s``.  Its
``run_*_chatapi.py`` scripts wrote bench_speculative's records.

The console output of SpecForge's humaneval / mtbench / gsm8k runs
(``benchmarks/run_*.py`` until 2025-11, then ``benchmarker`` through
``bench_eagle3.py``) is read as format ``specforge_eval_report``, in each of
its layouts: ``Latency: X s`` / ``Output throughput: X token/s`` / ``Accept
length: X`` (with ``Number of questions: N`` for mtbench, ``Accuracy:`` for
gsm8k; 2025-07), the same with ``Average `` in front (``--num-runs``,
2025-11), and ``print_results``'s block under ``NAME Evaluation Results``.
``bench_eagle3.py`` prints ``Running benchmark NAME with N prompts, batch
size B, steps S, topk K, num_draft_tokens D, subset X`` before each: that line
gives the dataset, the concurrency and the configuration (steps 0: no
speculation).  Their accept length is output tokens over verify steps, and
1.0 when the server had no speculation, so a length above 1 shows
speculation; exactly 1 does not tell (a server without it, or a draft whose
every token was rejected) and is left for the importer to say.
"""

from __future__ import annotations

import re

from backend.bench.importers_json import LDict
from backend.bench.importers_other import speculation_of
from backend.bench.records import Parsed, Problem, integer, num, sentinel_positive
from specdeck_types.bench import UNNAMED_SPECULATION, BenchConfig, BenchFigures, BenchLoad, BenchResult

SPECFORGE_JSON = "specforge_json"
SPECFORGE_REPORT = "specforge_report"
SPECFORGE_EAGLE3 = "specforge_bench_eagle3"
SPECFORGE_SPEEDUP = "specforge_speedup_jsonl"
SPECFORGE_EVAL = "specforge_eval_report"
SPECFORGE_TOOL = "SpecForge specforge benchmark"
EAGLE3_TOOL = "SpecForge benchmarks/bench_eagle3.py"
SPEEDUP_TOOL = "SpecForge benchmarks/bench_model_speedup.py"
EVAL_TOOL = "SpecForge benchmarks (run_*.py / bench_eagle3.py)"


def is_speedup_record(d: dict) -> bool:
    return "benchmark" in d and "throughput" in d and "steps" in d and "acc_length" in d


def is_specforge_result(d: dict) -> bool:
    return "throughput_tokens_per_second" in d


def is_bench_eagle3_document(d: dict) -> bool:
    return any(isinstance(v, list) and v and isinstance(v[0], dict) and "metrics" in v[0] for v in d.values())


# -- SpecForge --------------------------------------------------------------

def specforge_from_result(d: dict, path: str, line: int, raw: str, fmt: str = SPECFORGE_JSON) -> BenchResult:
    samples = integer(d.get("samples"), field="samples")
    acc = sentinel_positive(d.get("average_acceptance_length"), field="average_acceptance_length")
    verify = integer(d.get("spec_verify_count"), field="spec_verify_count")
    return BenchResult(
        source=f"import:{fmt}",
        tool=SPECFORGE_TOOL,
        # a verify count or an accept length above 1 shows speculation; none of them does not show its absence
        config=BenchConfig(algorithm=UNNAMED_SPECULATION if (verify or 0) > 0 or (acc or 0) > 1 else None),
        load=BenchLoad(num_prompts=samples, dataset=d.get("dataset") if isinstance(d.get("dataset"), str) else None),
        results=BenchFigures(
            output_tok_s=num(d.get("throughput_tokens_per_second"), field="throughput_tokens_per_second"),
            accept_len=acc,
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
                    acc = sentinel_positive(metrics.get("accept_length"), field="accept_length")
                    parsed.results.append(BenchResult(
                        source=f"import:{SPECFORGE_EAGLE3}",
                        tool=EAGLE3_TOOL,
                        config=BenchConfig(
                            draft_model=draft if steps != 0 else None,
                            algorithm=speculation_of(steps, "EAGLE3", acc),
                            num_steps=steps or None,
                            topk=integer(run.get("topk"), field="topk") or None,
                            num_draft_tokens=integer(run.get("num_draft_tokens"), field="num_draft_tokens") or None,
                        ),
                        load=BenchLoad(concurrency=bs, num_prompts=n, dataset=str(bench)),
                        results=BenchFigures(
                            output_tok_s=num(metrics.get("output_throughput"), field="output_throughput"),
                            accept_len=acc,
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


# -- SpecForge's bench_model_speedup.py and its printed lines ---------------------

def speedup_from_record(d: dict, path: str, line: int, raw: str) -> BenchResult:
    """One ``bench_model_speedup.py`` JSONL record."""
    bs = integer(d.get("batch_size"), field="batch_size")
    steps = integer(d.get("steps"), field="steps")
    acc = sentinel_positive(d.get("acc_length"), field="acc_length")
    bench = d.get("benchmark")
    return BenchResult(
        source=f"import:{SPECFORGE_SPEEDUP}",
        tool=SPEEDUP_TOOL,
        config=BenchConfig(
            algorithm=speculation_of(steps, "EAGLE3", acc),
            num_steps=steps or None,
            topk=integer(d.get("topk"), field="topk") or None,
            num_draft_tokens=integer(d.get("num_draft_tokens"), field="num_draft_tokens") or None,
        ),
        load=BenchLoad(concurrency=bs, dataset=bench if isinstance(bench, str) else None),
        results=BenchFigures(
            output_tok_s=num(d.get("throughput"), field="throughput"),
            accept_len=acc if steps != 0 else None,
            duration_s=num(d.get("duration"), field="duration"),
        ),
        source_file=path, source_line=line, raw=raw,
    )


def key_values(line: str) -> dict[str, str]:
    """``name=value`` items of a printed line (``steps=3, speed=12.5 token/s``; values quoted or bare).
    A hand-written scanner: linear in the line."""
    out: dict[str, str] = {}
    n = len(line)
    i = 0
    while i < n:
        eq = line.find("=", i)
        if eq < 0:
            break
        k = eq
        while k > i and (line[k - 1].isalnum() or line[k - 1] == "_"):
            k -= 1
        key = line[k:eq]
        j = eq + 1
        if j < n and line[j] in "'\"":
            end = line.find(line[j], j + 1)
            end = n if end < 0 else end
            value, i = line[j + 1:end], end + 1
        else:
            end = j
            while end < n and line[end] not in " ,=":
                end += 1
            value, i = line[j:end], end
        if key and len(key) <= 64:
            out[key] = value
        if i <= eq:
            i = eq + 1
    return out


def _unit_number(value: str | None, unit: str) -> str | None:
    """``12.5`` of ``12.5s`` / ``12.5 token/s``: the value with its unit cut off."""
    if value is None:
        return None
    v = value.strip()
    return v[: -len(unit)].strip() if unit and v.endswith(unit) else v


def parse_specforge_lines(text: str, path: str) -> Parsed:
    """``bs=8:bench_name='mtbench' ... throughput=Z token/s`` (bench_model_speedup.py without a server
    of its own) and ``Finish batch_size=B, steps=S, ..., speed=X token/s`` (run_*_chatapi.py)."""
    parsed = Parsed(SPECFORGE_SPEEDUP)
    for n, line in enumerate(text.splitlines(), 1):
        if "token/s" not in line or "=" not in line:
            continue
        try:
            if "bench_name=" in line and "throughput=" in line:
                kv = key_values(line.replace(":bench_name=", " bench_name=", 1))
                bs = kv.get("bs", "").split(":", 1)[0] if "bs" in kv else None
                bs_n = integer(bs, field="bs") if bs else None
                acc = sentinel_positive(None if kv.get("acc_length") == "None" else kv.get("acc_length"),
                                        field="acc_length")
                parsed.results.append(BenchResult(
                    source=f"import:{SPECFORGE_SPEEDUP}", tool=SPEEDUP_TOOL,
                    config=BenchConfig(algorithm=speculation_of(None, "EAGLE3", acc)),
                    load=BenchLoad(concurrency=bs_n, dataset=kv.get("bench_name") or None),
                    results=BenchFigures(output_tok_s=num(_unit_number(kv.get("throughput"), "token/s"),
                                                          field="throughput"),
                                         accept_len=acc,
                                         duration_s=num(_unit_number(kv.get("duration"), "s"), field="duration")),
                    source_file=path, source_line=n, raw=line.strip(),
                ))
            elif line.lstrip().startswith("Finish ") and "speed=" in line and "batch_size=" in line:
                kv = key_values(line)
                bs = integer(kv.get("batch_size"), field="batch_size")
                steps = integer(kv.get("steps"), field="steps")
                speed = num(_unit_number(kv.get("speed"), "token/s"), field="speed")
                parsed.results.append(BenchResult(
                    source=f"import:{SPECFORGE_SPEEDUP}", tool=SPEEDUP_TOOL,
                    config=BenchConfig(algorithm=speculation_of(steps, "EAGLE3"), num_steps=steps or None,
                                       topk=integer(kv.get("topk"), field="topk") or None,
                                       num_draft_tokens=integer(kv.get("num_draft_tokens"),
                                                                field="num_draft_tokens") or None),
                    load=BenchLoad(concurrency=bs, dataset="custom"),
                    results=BenchFigures(output_tok_s=speed * bs if speed is not None and bs else None),
                    source_file=path, source_line=n, raw=line.strip(),
                ))
        except ValueError as exc:
            parsed.problems.append(Problem(path, n, str(exc)))
    return parsed


# -- SpecForge's humaneval / mtbench / gsm8k console output -----------------------

_EVAL_KEYS = {  # label (without "Average ") -> (key, unit)
    "number of questions": ("questions", ""),
    "latency": ("latency", "s"),
    "output throughput": ("throughput", "token/s"),
    "accept length": ("accept_len", ""),
    "accuracy": ("accuracy", ""),
    "invalid": ("invalid", ""),
}
_RUNNING = "Running benchmark "
_SCRIPT_DATASETS = ("mtbench", "humaneval", "gsm8k", "math500", "aime", "ceval", "mmstar", "mbpp", "gpqa",
                    "livecodebench", "financeqa", "simpleqa", "mmlu", "qwq_longcot")


def _eval_label(line: str) -> tuple[str, str] | None:
    label, sep, value = line.partition(":")
    if not sep or len(label) > 60:
        return None
    label = " ".join(label.lower().split())
    if label.startswith("average "):
        label = label[len("average "):]
    if label not in _EVAL_KEYS:
        return None
    key, unit = _EVAL_KEYS[label]
    value = value.strip()
    if key == "throughput" and not value.endswith("token/s"):
        return None  # "Output throughput: X tok/s" is specforge benchmark's line
    value = value.split(" (", 1)[0]  # "Average Accuracy: 0.8 (80.00%)"
    return key, _unit_number(value, unit) or ""


def _running_line(line: str) -> dict[str, str | None] | None:
    """``Running benchmark NAME with N prompts, batch size B, steps S, topk K, num_draft_tokens D, subset X``."""
    at = line.find(_RUNNING)
    if at < 0:
        return None
    rest = line[at + len(_RUNNING):]
    name, _, rest = rest.partition(" with ")
    out: dict[str, str | None] = {"dataset": name.strip() or None}
    for part in rest.split(","):
        words = part.split()
        if len(words) >= 2 and words[-1] != "None":
            if words[-1] == "prompts" and len(words) == 2:
                out["prompts"] = words[0]
            elif words[:-1] == ["batch", "size"]:
                out["batch_size"] = words[-1]
            elif words[0] in ("steps", "topk", "num_draft_tokens") and len(words) == 2:
                out[words[0]] = words[1]
    return out


def _script_dataset(line: str) -> tuple[str, str | None] | None:
    """A command line of one of SpecForge's run_*.py scripts: its dataset and ``--parallel``."""
    at = line.find("run_")
    if at < 0 or ".py" not in line[at:]:
        return None
    name = line[at + 4:line.find(".py", at)]
    if name.endswith("_chatapi"):
        name = name[: -len("_chatapi")]
    if name not in _SCRIPT_DATASETS:
        return None
    words = line[at:].split()
    parallel = None
    for k, w in enumerate(words):
        if w == "--parallel" and k + 1 < len(words):
            parallel = words[k + 1]
        elif w.startswith("--parallel="):
            parallel = w.split("=", 1)[1]
    return name, parallel


def parse_specforge_eval(text: str, path: str, context=None) -> Parsed:
    """Every block of SpecForge's evaluation output in ``text``: a block is the lines of
    :data:`_EVAL_KEYS` around one ``Output throughput: X token/s``."""
    parsed = Parsed(SPECFORGE_EVAL)
    lines = text.splitlines()
    running: dict[str, str | None] | None = None
    script: tuple[str, str | None] | None = None
    banner: str | None = None
    block: dict[str, tuple[str, int]] = {}
    first = 0

    def flush(end: int) -> None:
        nonlocal block, banner
        if "throughput" not in block:
            block = {}
            return
        at = block["throughput"][1]
        try:
            parsed.results.append(_eval_result(block, running, script, banner, path, first,
                                               "\n".join(lines[first - 1:end]), context(first) if context else None))
        except ValueError as exc:
            bad = getattr(exc, "field", None)
            where = block.get(bad, (None, at))[1] if bad else at
            parsed.problems.append(Problem(path, where, str(exc)))
        block, banner = {}, None

    for n, line in enumerate(lines, 1):
        if _RUNNING in line:
            flush(n - 1)
            running = _running_line(line)
            continue
        sd = _script_dataset(line) if "run_" in line else None
        if sd:
            flush(n - 1)
            script, running = sd, None
            continue
        if line.rstrip().endswith(" Evaluation Results") and len(line) < 200:
            flush(n - 1)
            banner = line.strip()[: -len(" Evaluation Results")].strip() or None
            first = n
            continue
        kv = _eval_label(line)
        if kv is None:
            if line.strip() and not set(line.strip()) <= {"="} and block:
                flush(n - 1)
            continue
        key, value = kv
        if key in block and "throughput" in block:  # the next block starts
            flush(n - 1)
        if not block and banner is None:
            first = n
        block[key] = (value, n)
    flush(len(lines))
    return parsed


class _EvalError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _eval_result(block: dict[str, tuple[str, int]], running, script, banner, path: str, line: int,
                 raw: str, server: BenchConfig | None) -> BenchResult:
    def v(key: str, as_int: bool = False):
        if key not in block:
            return None
        try:
            return integer(block[key][0], field=key) if as_int else num(block[key][0], field=key)
        except ValueError as exc:
            raise _EvalError(key, str(exc)) from None

    acc = positive_or_none(v("accept_len"))
    running = running or {}
    steps = integer(running.get("steps"), field="steps") if running.get("steps") else None
    dataset = banner or running.get("dataset") or (script[0] if script else None)
    bs = running.get("batch_size") or (script[1] if script else None)
    config = server or BenchConfig()
    if steps is not None:
        config = BenchConfig(**{**config.__dict__, "algorithm": speculation_of(steps, "EAGLE3"),
                                "num_steps": steps or None,
                                "topk": integer(running.get("topk"), field="topk") or None if steps else None,
                                "num_draft_tokens": (integer(running.get("num_draft_tokens"),
                                                             field="num_draft_tokens") or None) if steps else None})
    elif config.algorithm is None and acc is not None and acc > 1:
        config = BenchConfig(**{**config.__dict__, "algorithm": UNNAMED_SPECULATION})
    questions = v("questions", True)
    if v("throughput") is None:
        raise _EvalError("throughput", "'Output throughput: X token/s' without a number")
    return BenchResult(
        source=f"import:{SPECFORGE_EVAL}",
        tool=EVAL_TOOL,
        config=config,
        load=BenchLoad(concurrency=integer(bs, field="batch size") if bs else None,
                       num_prompts=questions or (integer(running.get("prompts"), field="prompts")
                                                 if running.get("prompts") else None),
                       dataset=dataset),
        results=BenchFigures(output_tok_s=v("throughput"), accept_len=acc, duration_s=v("latency"),
                             completed=questions),
        source_file=path, source_line=line, raw=raw,
    )


def positive_or_none(value: float | None) -> float | None:
    return value if value is not None and value > 0 else None
