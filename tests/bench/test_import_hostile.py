"""Impossible figures are refused per field with the line named and never stored; a stored row
that an older version let through does not break `bench list`; hostile lines cost linear time;
quoted pastes are read."""

from __future__ import annotations

import io
import json
import time

import pytest

from backend.bench.importers import parse_text
from backend.bench.records import NotABenchmark
from backend.cli import main
from state.bench import BenchStore
from state.store import Store

REPORT = """============ Serving Benchmark Result ============
Backend:                                 sglang
Max request concurrency:                 4
Successful requests:                     80
Benchmark duration (s):                  57.31
Request throughput (req/s):              1.40
Output token throughput (tok/s):         {tok}
Concurrency:                             3.9
==================================================
"""


@pytest.mark.parametrize("value, why", [("inf", "infinity"), ("nan", "NaN"), ("-3.5", "negative"),
                                        ("1e308", "too large"), ("123456789012345678901234567890", "too large")])
def test_impossible_throughput_is_refused_with_line_and_field(value, why):
    parsed = parse_text(REPORT.format(tok=value), "r.txt")
    assert parsed.results == []
    [p] = parsed.problems
    assert p.line == 7 and "output token throughput (tok/s)" in p.message and why in p.message


@pytest.mark.parametrize("record, field", [
    ('{"output_throughput": 12.0, "mean_ttft_ms": 1.0, "max_concurrency": 1e400}', "max_concurrency"),
    ('{"output_throughput": 12.0, "mean_ttft_ms": 1.0, "completed": 99999999999999999999999}', "completed"),
    ('{"output_throughput": Infinity, "mean_ttft_ms": 1.0}', "output_throughput"),
    ('{"output_throughput": 12.0, "mean_ttft_ms": -Infinity}', "mean_ttft_ms"),
])
def test_impossible_json_values_are_refused(record, field):
    parsed = parse_text(record + "\n" + record.replace("12.0", "13.0") + "\n", "r.jsonl")
    assert [p.line for p in parsed.problems if field in p.message][:1] == [1]
    assert all(r.results.output_tok_s in (None, 13.0) for r in parsed.results)


def test_json_control_characters_and_deep_nesting_are_problems_not_tracebacks():
    good = '{"output_throughput": 1.0, "mean_ttft_ms": 1.0}'
    text = "\n".join([good, '{"output_throughput": 2.0, "mean_ttft_ms": 1.0, "ta\x01g": "x"}', "[" * 5000,
                      '{"output_throughput": 3.0, "mean_\x1fttft_ms": 1.0}'])
    parsed = parse_text(text, "r.jsonl")
    assert [r.results.output_tok_s for r in parsed.results] == [1.0]
    assert sorted(p.line for p in parsed.problems) == [2, 3, 4]
    doc = '{\n  "mod\x01el": "d",\n  "mtbench": []\n}\n'
    with pytest.raises(NotABenchmark):
        parse_text(doc, "d.json")


def test_nan_latency_is_no_value_but_nan_throughput_is_refused():
    ok = parse_text('{"output_throughput": 5.0, "mean_ttft_ms": 1.0, "mean_itl_ms": NaN}', "a.jsonl")
    assert ok.results[0].results.itl_ms.mean is None and ok.problems == []
    bad = parse_text('{"output_throughput": NaN, "mean_ttft_ms": 1.0}', "b.jsonl")
    assert bad.results == [] and "output_throughput is NaN" in bad.problems[0].message


def test_bench_list_reads_rows_an_older_version_stored(tmp_path):
    ws = str(tmp_path / "ws")
    assert main(["init", ws], io.StringIO()) == 0
    store = Store(tmp_path / "ws" / "state.db")
    data = {"source": "import:bench_serving_report", "results": {"output_tok_s": "inf", "completed": "lots",
                                                                 "ttft_ms": {"mean": "-inf"}},
            "load": {"concurrency": 2.0, "request_rate": "inf"}, "config": {"algorithm": 7}}
    with store.transaction() as conn:
        conn.execute("INSERT INTO bench_results (created_at, source, data, raw) VALUES (?, ?, ?, ?)",
                     (1.0, "import:bench_serving_report", json.dumps(data), "raw"))
        conn.execute("INSERT INTO bench_results (created_at, source, data, raw) VALUES (?, ?, ?, ?)",
                     (2.0, "import:x", "{not json", "raw2"))
    store.close()
    out = io.StringIO()
    assert main(["-w", ws, "bench", "list"], out, io.StringIO()) == 0
    assert "inf tok/s" in out.getvalue() and "stored data unreadable" in out.getvalue()
    out = io.StringIO()
    assert main(["-w", ws, "bench", "list", "--json"], out, io.StringIO()) == 0
    rows = [json.loads(x) for x in out.getvalue().splitlines()]
    odd = [r for r in rows if r["results"].get("completed") == "lots"]
    assert odd == [] and any(r["load"]["concurrency"] == 2 for r in rows)


def test_the_store_keeps_no_impossible_figure(tmp_path):
    from specdeck_types.bench import BenchFigures, BenchLoad, BenchResult
    store = BenchStore(Store(tmp_path / "s.db"))
    r = store.insert(BenchResult(source="run", load=BenchLoad(concurrency=10**30, request_rate=float("inf")),
                                 results=BenchFigures(output_tok_s=float("nan"), total_tok_s=1e308,
                                                      duration_s=3.0))).result
    got = store.get(r.id)
    assert got.load.concurrency is None and got.results.output_tok_s is None and got.results.total_tok_s is None
    assert got.load.request_rate == float("inf") and got.results.duration_s == 3.0


HOSTILE = ["=" * 200_000, " " * 200_000 + "x", "Label" + " " * 200_000 + "x", "batch size:" + " " * 200_000 + "1x",
           "Namespace(" + "a" * 200_000, "> " * 100_000, "=" * 200_000 + " Warmup Begin", "- " * 100_000 + "x",
           "launch_server '" + "a" * 200_000, "bs=8:bench_name=" + "=" * 200_000 + " token/s"]


@pytest.mark.parametrize("line", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
def test_a_200k_character_hostile_line_is_read_in_linear_time(line):
    text = REPORT.format(tok="12.5") + line + "\n" + REPORT.format(tok="13.5")
    t = time.perf_counter()
    parsed = parse_text(text, "h.txt")
    elapsed = time.perf_counter() - t
    assert [r.results.output_tok_s for r in parsed.results] == [12.5, 13.5]
    assert elapsed < 5.0, f"{elapsed:.1f} s for one line of {len(line):,} characters"


@pytest.mark.parametrize("quote", ["> ", "# ", ">> ", "// "])
def test_a_quoted_or_commented_report_is_read(quote):
    text = "\n".join(quote + x for x in REPORT.format(tok="1,234.5").splitlines())
    parsed = parse_text(text, "q.md")
    assert [r.results.output_tok_s for r in parsed.results] == [1234.5]
    assert parsed.results[0].source_line == 1 and parsed.results[0].load.concurrency == 4


def test_a_fenced_json_record_is_read_and_lines_keep_their_numbers():
    text = "Here it is:\n```json\n" + '{"output_throughput": 9.5, "mean_ttft_ms": 1.0}\n' + "```\n"
    parsed = parse_text(text, "f.md")
    assert [(r.results.output_tok_s, r.source_line) for r in parsed.results] == [(9.5, 3)]


def test_quoted_text_that_is_no_report_says_what_was_expected():
    with pytest.raises(NotABenchmark, match=r"taking off the '> ' quoting of 2 lines.*|expected") as exc:
        parse_text("> hello\n> world\n", "q.md")
    assert "Serving Benchmark Result" in str(exc.value)
