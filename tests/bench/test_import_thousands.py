"""Figures printed with thousands separators ("1,234.56"), as long runs and pasted reports have them,
are read as the numbers they are: in bench_serving's report, SpecForge's printout and a CSV."""

from __future__ import annotations

import pytest

from backend.bench.importers import parse_text
from backend.bench.records import integer, num

REPORT = """\
============ Serving Benchmark Result ============
Backend:                                 sglang
Traffic request rate:                    inf
Max request concurrency:                 1,024
Successful requests:                     12,000
Benchmark duration (s):                  1,244.23
Total input tokens:                      12,288,000
Total generated tokens:                  6,144,000
Request throughput (req/s):              9.64
Input token throughput (tok/s):          9,876.00
Output token throughput (tok/s):         4,938.12
Total token throughput (tok/s):          14,814.12
Concurrency:                             1,003.21
Accept length:                           2.14
----------------End-to-End Latency----------------
Mean E2E Latency (ms):                   106,208.40
Median E2E Latency (ms):                 104,001.95
---------------Time to First Token----------------
Mean TTFT (ms):                          1,288.37
P99 TTFT (ms):                           12,001.50
==================================================
"""


def test_a_bench_serving_report_with_separators():
    parsed = parse_text(REPORT, "nohup.out")
    assert parsed.problems == []
    (r,) = parsed.results
    assert r.load.concurrency == 1024
    assert r.results.completed == 12000 and r.results.duration_s == 1244.23
    assert r.results.output_tok_s == 4938.12 and r.results.total_tok_s == 14814.12
    assert r.results.e2e_ms.mean == 106208.40 and r.results.e2e_ms.median == 104001.95
    assert r.results.ttft_ms.mean == 1288.37 and r.results.ttft_ms.p99 == 12001.50
    assert r.results.accept_len_lifetime == 2.14


def test_a_specforge_printout_with_separators():
    text = ("Backend: sglang\n"
            "Dataset: gsm8k (1319 completed prompts/turns)\n"
            "Output throughput: 1,541.22 tok/s\n"
            "Average acceptance length: 2.314\n"
            "Speculative verify count: 150,211\n")
    parsed = parse_text(text, "specforge.out")
    assert parsed.problems == []
    (r,) = parsed.results
    assert r.results.output_tok_s == 1541.22 and r.results.accept_len == 2.314


def test_a_csv_cell_with_separators():
    text = ("server,algorithm,concurrency,num_prompts,output_tok_s,e2e_mean_ms\n"
            'glm5,EAGLE3,64,"1,000","1,234.56","12,345.6"\n')
    parsed = parse_text(text, "numbers.csv")
    assert parsed.problems == []
    (r,) = parsed.results
    assert r.load.num_prompts == 1000
    assert r.results.output_tok_s == 1234.56 and r.results.e2e_ms.mean == 12345.6


@pytest.mark.parametrize("text, value", [("1,234.56", 1234.56), ("12,345", 12345.0), ("1,024,000", 1024000.0),
                                         (" 4,938.12 ", 4938.12), ("1,234.5%", 1234.5)])
def test_num_takes_separators(text, value):
    assert num(text, field="x") == value


def test_integer_takes_separators_but_not_a_fraction():
    assert integer("12,000", field="completed") == 12000
    with pytest.raises(ValueError, match="not a whole number"):
        integer("1,234.5", field="completed")
    with pytest.raises(ValueError, match="not a number"):
        num("1.234,56 tok/s", field="output")
