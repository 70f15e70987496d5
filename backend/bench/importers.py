"""Import benchmark results from files; the format is recognised from the content.

    parse_text(text, path) -> Parsed      # pure: text in, results and problems out
    parse_bytes(data, path) -> Parsed     # bytes in (UTF-8), then parse_text
    import_file(path) -> Parsed           # reads the file, then parse_bytes

Formats (one module each; see their docstrings for the keys by version):

* ``bench_serving_jsonl`` / ``bench_serving_report`` — :mod:`backend.bench.importers_serving`
* ``one_batch_server_jsonl`` / ``_report`` / ``_table``, ``bench_speculative_jsonl``,
  ``specforge_json`` / ``specforge_report`` / ``specforge_bench_eagle3`` —
  :mod:`backend.bench.importers_other`
* ``csv`` (hand-entered numbers, documented header) — :mod:`backend.bench.importers_csv`

A JSONL file may mix record kinds; a console log may hold many reports.  A
line that cannot be read is reported as a :class:`~backend.bench.records.Problem`
(file, line, field) and the rest of the file is still imported.  A file with
nothing recognisable raises :class:`~backend.bench.records.NotABenchmark`
naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

from backend.bench import importers_csv, importers_other as other, importers_serving as serving
from backend.bench.importers_json import JSONTextError, LDict, load_with_lines
from backend.bench.records import BenchImportError, NotABenchmark, Parsed, Problem, audit_raw
from backend.readcap import BENCH_FILE_MAX, TooLarge, read_bytes_whole, size_text
from specdeck_types.bench import BenchResult

__all__ = ["BenchImportError", "NotABenchmark", "Parsed", "Problem", "import_file", "parse_bytes", "parse_text"]

_KNOWN = (
    "bench_serving's report ('Serving Benchmark Result') or JSONL (output_throughput, mean_ttft_ms),"
    " bench_one_batch_server's output (batch size / latency), bench_speculative's JSONL"
    " (acc_length, step_time, speed), SpecForge's benchmark output (throughput_tokens_per_second,"
    " 'Output throughput: X tok/s') or a CSV with an output_tok_s column"
)


def import_file(path: str | Path) -> Parsed:
    p = Path(path).expanduser().resolve()
    name = str(p)
    try:
        data = read_bytes_whole(p, BENCH_FILE_MAX, "a benchmark file")
    except TooLarge as exc:
        size = size_text(exc.size) if exc.size else "too large"
        raise BenchImportError(name, 0, f"{size}, over the {size_text(BENCH_FILE_MAX)} read limit for a benchmark "
                                        "file; not read") from None
    except OSError as exc:
        raise BenchImportError(name, 0, f"cannot be read: {exc.strerror or exc}") from None
    return parse_bytes(data, name)


def parse_bytes(data: bytes, path: str) -> Parsed:
    """``parse_text`` of a file's bytes (UTF-8, a byte-order mark allowed)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise NotABenchmark(path, line, "not a text file (not UTF-8); " + _KNOWN) from None
    return parse_text(text, path)


def parse_text(text: str, path: str) -> Parsed:
    if not text.strip():
        raise NotABenchmark(path, 1, "the file is empty")
    if path.lower().endswith(".csv") or importers_csv.looks_like(text):
        return importers_csv.parse(text, path)
    if text.lstrip()[:1] in "{[":
        parsed = _parse_json(text, path)
    else:
        parsed = _parse_console(text, path)
    if not parsed.results and not parsed.problems:
        raise NotABenchmark(path, _first_line(text), "not a benchmark result: none of " + _KNOWN + " found")
    return parsed


def _first_line(text: str) -> int:
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            return n
    return 1


# -- JSON and JSONL -----------------------------------------------------

def _record(d: dict, path: str, line: int, raw: str) -> BenchResult | None:
    if serving.is_serving_record(d):
        return serving.result_from_record(d, path, line, raw)
    if other.is_one_batch_record(d):
        return other.one_batch_from_record(d, path, line, raw)
    if other.is_speculative_record(d):
        return other.speculative_from_record(d, path, line, raw)
    if other.is_specforge_result(d):
        return other.specforge_from_result(d, path, line, raw)
    return None


def _parse_json(text: str, path: str) -> Parsed:
    lines = text.splitlines()
    nonblank = [n for n, line in enumerate(lines, 1) if line.strip()]
    if len(nonblank) > 1:  # several lines: one indented document, or JSONL
        try:
            doc = load_with_lines(text)
        except JSONTextError:
            doc = None
        if isinstance(doc, LDict):
            if other.is_bench_eagle3_document(doc):
                return other.parse_bench_eagle3(doc, path, lines)
            try:
                result = _record(doc, path, doc.line, text.strip())
            except ValueError as exc:
                return Parsed("json", problems=[Problem(path, doc.line, str(exc))])
            if result is None:
                raise NotABenchmark(path, doc.line, "a JSON object with none of the keys of " + _KNOWN)
            return Parsed(result.format or "json", results=[result])
    parsed = Parsed("jsonl")
    unknown: list[int] = []
    if not any(_is_json(lines[n - 1]) for n in nonblank):
        return _parse_console(text, path)  # e.g. a log whose lines start with "[2026-..."
    for n in nonblank:
        raw = lines[n - 1].strip()
        try:
            d = json.loads(raw)  # json accepts Infinity and NaN, as bench_serving writes them
        except json.JSONDecodeError as exc:
            parsed.problems.append(Problem(path, n, f"not a JSON record ({exc.msg} at column {exc.colno})"))
            continue
        if not isinstance(d, dict):
            unknown.append(n)
            continue
        try:
            result = _record(d, path, n, audit_raw(raw, d))
        except ValueError as exc:
            parsed.problems.append(Problem(path, n, str(exc)))
            continue
        if result is None:
            unknown.append(n)
        else:
            parsed.results.append(result)
    if not parsed.results and unknown and len(unknown) + len(parsed.problems) == len(nonblank):
        raise NotABenchmark(path, unknown[0], "a JSON record with none of the keys of " + _KNOWN)
    for n in unknown:
        parsed.problems.append(Problem(path, n, "a JSON record of no benchmark format Specdeck knows"))
    if parsed.results:
        parsed.format = _formats(parsed.results)
    return parsed


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


# -- console output ------------------------------------------------------

def _parse_console(text: str, path: str) -> Parsed:
    parts = [serving.parse_report(text, path), other.parse_specforge_report(text, path)]
    printed = other.parse_one_batch_report(text, path)
    parts.append(printed)
    if not printed.results:  # the table repeats the printed cases
        parts.append(other.parse_one_batch_table(text, path))
    results = sorted((r for p in parts for r in p.results), key=lambda r: r.source_line or 0)
    problems = sorted((q for p in parts for q in p.problems), key=lambda q: q.line)
    return Parsed(_formats(results) if results else "text", results=results, problems=problems)


def _formats(results: list[BenchResult]) -> str:
    seen: list[str] = []
    for r in results:
        if r.format and r.format not in seen:
            seen.append(r.format)
    return ",".join(seen)
