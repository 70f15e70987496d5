"""Import benchmark results from files; the format is recognised from the content.

    parse_text(text, path) -> Parsed      # pure: text in, results and problems out
    parse_bytes(data, path) -> Parsed     # bytes in (UTF-8), then parse_text
    import_file(path) -> Parsed           # reads the file, then parse_bytes

Formats (one module each; see their docstrings for the keys by version):

* ``bench_serving_jsonl`` / ``bench_serving_report`` (SGLang), ``vllm_bench_serve_json`` /
  ``vllm_bench_serve_report`` (vLLM), ``serving_report`` (the banner, tool not shown) —
  :mod:`backend.bench.importers_serving`
* ``one_batch_server_jsonl`` / ``_report`` / ``_table``, ``bench_speculative_jsonl`` —
  :mod:`backend.bench.importers_other`
* ``specforge_json`` / ``specforge_report`` / ``specforge_bench_eagle3`` /
  ``specforge_speedup_jsonl`` / ``specforge_eval_report`` — :mod:`backend.bench.importers_specforge`
* ``csv`` (hand-entered numbers, documented header) — :mod:`backend.bench.importers_csv`

A JSONL file may mix record kinds; a console log may hold many reports.  A
line that cannot be read is reported as a :class:`~backend.bench.records.Problem`
(file, line, field) and the rest of the file is still imported.  A file with
nothing recognisable raises :class:`~backend.bench.records.NotABenchmark`
naming the file and line.

Before reading, a paste's quoting is taken off, keeping line numbers: markdown
fences become blank lines, and a ``> `` (markdown quote) or ``# `` / ``// ``
(comment) prefix shared by most lines is removed from them.

Speculation is read from the report where it shows (an accept length above 1,
a verify count, ``steps``) and from a server command line earlier in a console
file (``sglang.launch_server ... --speculative-algorithm EAGLE3``, ``vllm serve
... --speculative-config '{"method": ...}'``, a ``server_args=ServerArgs(...)``
dump): each report takes the configuration of the last launch above it, a
launch without speculative flags being a run without speculation.  In a file
of SGLang reports where some print ``Accept length:``, one that prints none ran
without speculation (bench_serving prints it whenever the server speculates).

Every result is checked before it is returned: a figure that is not finite,
negative or past :data:`~backend.bench.records.MAX_FIGURE` skips the result, as
a problem naming its line and field, so nothing impossible is stored.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

from backend.bench import importers_csv, importers_other as other, importers_serving as serving
from backend.bench import importers_specforge as specforge
from backend.bench.importers_json import JSONTextError, LDict, load_with_lines
from backend.bench.records import BenchImportError, NotABenchmark, Parsed, Problem, audit_raw, check_result
from backend.readcap import BENCH_FILE_MAX, TooLarge, read_bytes_whole, size_text
from specdeck_types.bench import NO_SPECULATION, UNNAMED_SPECULATION, BenchConfig, BenchResult

__all__ = ["BenchImportError", "NotABenchmark", "Parsed", "Problem", "import_file", "parse_bytes", "parse_text"]

_KNOWN = (
    "SGLang bench_serving's or vLLM bench serve's report ('Serving Benchmark Result') or JSON"
    " (output_throughput, mean_ttft_ms), bench_one_batch_server's output (batch size / latency),"
    " bench_speculative's JSONL (acc_length, step_time, speed), SpecForge's benchmark output"
    " (throughput_tokens_per_second, 'Output throughput: X tok/s'), SpecForge's benchmarks/ results"
    " (bench_eagle3.py's results JSON, bench_model_speedup.py's JSONL, 'Output throughput: X token/s'"
    " of its humaneval / mtbench runs) or a CSV with an output_tok_s column"
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
    text, quoting = unquote(text)
    if not text.strip():
        raise NotABenchmark(path, 1, f"nothing but {quoting}; expected " + _KNOWN)
    try:
        if path.lower().endswith(".csv") or importers_csv.looks_like(text):
            parsed = importers_csv.parse(text, path)
        elif text.lstrip()[:1] in "{[":
            parsed = _parse_json(text, path)
        else:
            parsed = _parse_console(text, path)
    except NotABenchmark as exc:
        if quoting:
            raise NotABenchmark(path, exc.line, f"{exc.message} (read after taking off {quoting})") from None
        raise
    if not parsed.results and not parsed.problems:
        why = "not a benchmark result: none of " + _KNOWN + " found"
        raise NotABenchmark(path, _first_line(text), why + (f" (read after taking off {quoting})" if quoting else ""))
    return _checked(parsed, path)


def _checked(parsed: Parsed, path: str) -> Parsed:
    """Leave out results with a figure that must not be stored, each as a problem naming its line and field."""
    kept: list[BenchResult] = []
    for r in parsed.results:
        try:
            check_result(r)
        except ValueError as exc:
            parsed.problems.append(Problem(path, r.source_line or 1, f"{exc}; this result is not stored"))
            continue
        if r.tool is None and r.format in TOOL_FORMATS:
            r = replace(r, tool=TOOL_FORMATS[r.format])
        acc = r.accept_len
        if r.config.algorithm == NO_SPECULATION and acc is not None and acc > 1 and r.format != importers_csv.FORMAT:
            # a launch line said no speculation, the report's accept length says otherwise: trust the report
            r = replace(r, config=replace(r.config, algorithm=UNNAMED_SPECULATION))
        kept.append(r)
    parsed.results = kept
    return parsed


TOOL_FORMATS = {importers_csv.FORMAT: "hand-entered (CSV)"}


# -- quoting -----------------------------------------------------------------

_COMMENT_PREFIXES = ("# ", "// ", "-- ", ";; ")


def unquote(text: str) -> tuple[str, str]:
    """``text`` without a paste's quoting, line for line (so line numbers hold), and what was taken
    off ("" for nothing): markdown fences become blank lines; a ``>`` quote or a comment prefix
    (``# ``, ``// ``) on most of the lines is removed from each line that has it."""
    lines = text.splitlines()
    taken: list[str] = []
    fences: list[int] = []
    for k, line in enumerate(lines):
        s = line.lstrip()
        if s.startswith("```") or s.startswith("~~~"):
            lines[k] = ""
            fences.append(k)
    if fences:
        taken.append(f"{len(fences)} markdown fence line{'s' if len(fences) != 1 else ''}")
        inside = next((x.lstrip()[:1] for x in lines[fences[0] + 1:] if x.strip()), "")
        outside = next((x.lstrip()[:1] for x in lines[:fences[0]] if x.strip()), "")
        if inside in ("{", "[") and outside not in ("{", "["):
            # JSON in a fence under some prose: the prose is not part of the file
            fenced = set()
            for a, b in zip(fences[::2], fences[1::2] + [len(lines)]):
                fenced.update(range(a + 1, b))
            lines = [x if k in fenced else "" for k, x in enumerate(lines)]
            taken.append("the text outside the fences")
    nonblank = [k for k, line in enumerate(lines) if line.strip()]
    if nonblank:
        quoted = [k for k in nonblank if lines[k].lstrip().startswith(">")]
        if len(quoted) * 10 >= len(nonblank) * 6:
            for k in quoted:
                s = lines[k]
                i = len(s) - len(s.lstrip())
                while i < len(s) and s[i] == ">":  # nested quotes ("> > text"), by index: linear
                    i += 1
                    if i < len(s) and s[i] == " ":
                        i += 1
                    j = i
                    while j < len(s) and s[j] in " \t":
                        j += 1
                    if j < len(s) and s[j] == ">":
                        i = j
                lines[k] = s[i:]
            taken.append(f"the '> ' quoting of {len(quoted)} line{'s' if len(quoted) != 1 else ''}")
        nonblank = [k for k, line in enumerate(lines) if line.strip()]
        for prefix in _COMMENT_PREFIXES:
            bare = prefix.strip()
            marked = [k for k in nonblank if lines[k].lstrip().startswith(prefix) or lines[k].strip() == bare]
            if nonblank and len(marked) * 10 >= len(nonblank) * 6:
                for k in marked:
                    s = lines[k].lstrip()
                    lines[k] = s[len(prefix):] if s.startswith(prefix) else ""
                taken.append(f"the '{prefix}' prefix of {len(marked)} line{'s' if len(marked) != 1 else ''}")
                break
    if not taken:
        return text, ""
    return "\n".join(lines), " and ".join(taken)


def _first_line(text: str) -> int:
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            return n
    return 1


# -- JSON and JSONL -----------------------------------------------------

def _record(d: dict, path: str, line: int, raw: str) -> BenchResult | None:
    """The result of one JSON record, None for a record of no known format.  Raises
    ``ValueError`` naming the field for a record that cannot be read."""
    try:
        if serving.is_serving_record(d):
            return serving.result_from_record(d, path, line, raw)
        if other.is_one_batch_record(d):
            return other.one_batch_from_record(d, path, line, raw)
        if other.is_speculative_record(d):
            return other.speculative_from_record(d, path, line, raw)
        if specforge.is_speedup_record(d):
            return specforge.speedup_from_record(d, path, line, raw)
        if specforge.is_specforge_result(d):
            return specforge.specforge_from_result(d, path, line, raw)
    except (TypeError, AttributeError, KeyError, OverflowError) as exc:
        raise ValueError(f"a record that cannot be read ({type(exc).__name__}: {exc})") from None
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
            if specforge.is_bench_eagle3_document(doc):
                return specforge.parse_bench_eagle3(doc, path, lines)
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
        except RecursionError:
            parsed.problems.append(Problem(path, n, "not a JSON record (nested too deeply)"))
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
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


# -- console output ------------------------------------------------------

def _parse_console(text: str, path: str) -> Parsed:
    lines = text.splitlines()
    context = server_context(lines)
    parts = [serving.parse_report(text, path, context), specforge.parse_specforge_report(text, path),
             specforge.parse_specforge_eval(text, path, context), specforge.parse_specforge_lines(text, path)]
    printed = other.parse_one_batch_report(text, path)
    parts.append(printed)
    if not printed.results:  # the table repeats the printed cases
        parts.append(other.parse_one_batch_table(text, path))
    results = sorted((r for p in parts for r in p.results), key=lambda r: r.source_line or 0)
    results = _baselines_beside_accept_lengths(results)
    problems = sorted((q for p in parts for q in p.problems), key=lambda q: q.line)
    return Parsed(_formats(results) if results else "text", results=results, problems=problems)


def _baselines_beside_accept_lengths(results: list[BenchResult]) -> list[BenchResult]:
    """SGLang's reports print ``Accept length:`` whenever the server speculates: in a file where some
    do, a report without the line (not even a 0) ran without speculation."""
    sglang = [r for r in results if r.format == serving.REPORT_FORMAT]
    if not any("accept length:" in r.raw.lower() for r in sglang):
        return results
    out = []
    for r in results:
        if r.format == serving.REPORT_FORMAT and r.config.algorithm is None and "accept length:" not in r.raw.lower():
            r = replace(r, config=replace(r.config, algorithm=NO_SPECULATION))
        out.append(r)
    return out


# -- server command lines in a console file -------------------------------------

_LAUNCH_WORDS = ("launch_server", "sglang serve", "vllm serve", "server_args=ServerArgs(")
_FLAG_FIELDS = {
    "--model-path": "target_model", "--model": "target_model",
    "--speculative-algorithm": "algorithm", "--speculative-algo": "algorithm",
    "--speculative-draft-model-path": "draft_model", "--speculative-draft-model": "draft_model",
    "--speculative-draft": "draft_model",
    "--speculative-num-steps": "num_steps", "--speculative-eagle-topk": "topk",
    "--speculative-num-draft-tokens": "num_draft_tokens",
    "--tp": "tp", "--tp-size": "tp", "--tensor-parallel-size": "tp",
}
_INT_FIELDS = ("num_steps", "topk", "num_draft_tokens", "tp")
_MAX_COMMAND = 64 * 1024


def _small_int(v) -> int | None:
    try:
        n = int(str(v).strip().strip("'\""))
    except (TypeError, ValueError):
        return None
    return n if 0 <= n <= 10**6 else None


def launch_config(command: str) -> BenchConfig | None:
    """The server configuration a launch command (or a ``ServerArgs(...)`` dump) shows; None when
    ``command`` launches no server.  A launch without speculative flags is a run without speculation."""
    if not any(w in command for w in _LAUNCH_WORDS):
        return None
    got: dict[str, object] = {}
    if "ServerArgs(" in command:
        kv = specforge.key_values(command[command.find("ServerArgs("):])
        for key, field in (("model_path", "target_model"), ("served_model_name", "target_model"),
                           ("speculative_algorithm", "algorithm"), ("speculative_draft_model_path", "draft_model"),
                           ("speculative_num_steps", "num_steps"), ("speculative_eagle_topk", "topk"),
                           ("speculative_num_draft_tokens", "num_draft_tokens"), ("tp_size", "tp")):
            v = kv.get(key)
            if v and v != "None" and field not in got:
                got[field] = v
    else:
        try:
            words = shlex.split(command, comments=False)
        except ValueError:
            words = command.split()
        k = 0
        while k < len(words):
            w = words[k]
            flag, eq, inline = w.partition("=")
            flag = flag.replace("_", "-") if flag.startswith("--") else flag
            value = inline if eq else (words[k + 1] if k + 1 < len(words) else None)
            if flag in _FLAG_FIELDS and value is not None:
                got.setdefault(_FLAG_FIELDS[flag], value)
            elif flag == "--speculative-config" and value is not None:
                try:
                    spec = json.loads(value)
                except (ValueError, RecursionError):
                    spec = None
                if isinstance(spec, dict):
                    if isinstance(spec.get("method"), str):
                        got["algorithm"] = spec["method"].upper()
                    if isinstance(spec.get("model"), str):
                        got["draft_model"] = spec["model"]
                    if spec.get("num_speculative_tokens") is not None:
                        got["num_steps"] = spec.get("num_speculative_tokens")
            elif w == "serve" and k + 1 < len(words) and not words[k + 1].startswith("-"):
                got.setdefault("target_model", words[k + 1])
            k += 1
    for f in _INT_FIELDS:
        if f in got:
            got[f] = _small_int(got[f])
    for f in ("target_model", "draft_model", "algorithm"):
        if f in got:
            v = str(got[f]).strip().strip("'\"")
            got[f] = v[:300] if v else None
    if got.get("algorithm"):
        got["algorithm"] = str(got["algorithm"]).upper()
        if got["algorithm"] == "NEXTN":
            got["algorithm"] = "EAGLE"  # SGLang's alias
    else:
        got["algorithm"] = NO_SPECULATION
        for f in ("draft_model", "num_steps", "topk", "num_draft_tokens"):
            got.pop(f, None)
    return BenchConfig(**got)


def server_context(lines: list[str]):
    """A function from a 1-based line to the configuration of the last server launched above it."""
    marks: list[tuple[int, BenchConfig]] = []
    k = 0
    while k < len(lines):
        line = lines[k]
        if not any(w in line for w in _LAUNCH_WORDS) or len(line) > _MAX_COMMAND:
            k += 1
            continue
        start = k
        command = line
        while command.rstrip().endswith("\\") and k + 1 < len(lines) and len(command) < _MAX_COMMAND and \
                k - start < 80:
            k += 1
            command = command.rstrip()[:-1] + " " + lines[k]
        cfg = launch_config(command)
        if cfg is not None:
            marks.append((start + 1, cfg))
        k += 1

    def at(line: int) -> BenchConfig | None:
        found = None
        for where, cfg in marks:
            if where >= line:
                break
            found = cfg
        return found

    return at


def _formats(results: list[BenchResult]) -> str:
    seen: list[str] = []
    for r in results:
        if r.format and r.format not in seen:
            seen.append(r.format)
    return ",".join(seen)
