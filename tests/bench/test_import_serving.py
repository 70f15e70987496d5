"""bench_serving: JSONL of 0.4.6 / 0.5.4 / 0.5.23 and the printed report, padded and pasted.

Every expected value is copied from the fixture's text."""

from __future__ import annotations

import math
import re

import pytest

from backend.bench.importers import import_file, parse_text


def test_jsonl_0_4_6_infinity_sharegpt_and_older_keys(fixture_path):
    parsed = import_file(fixture_path("bench_serving_0.4.6.jsonl"))
    assert parsed.problems == []
    a, b = parsed.results
    assert a.source == "import:bench_serving_jsonl" and a.source_line == 1
    assert a.source_file == str(fixture_path("bench_serving_0.4.6.jsonl").resolve())
    assert a.load.request_rate == math.inf
    assert a.load.concurrency is None  # "max_concurrency": null
    assert a.load.dataset == "sharegpt"
    assert a.load.input_len is None and a.load.output_len is None  # random_* do not apply to sharegpt
    assert a.results.output_tok_s == 285.8846293293186
    assert a.results.total_tok_s == pytest.approx(312.68631332894217 + 285.8846293293186)  # no total_throughput in 0.4.6
    assert a.results.ttft_ms.p99 == 4410.09281475842 and a.results.ttft_ms.p90 is None
    assert a.results.itl_ms.p95 == 251.6
    assert a.results.completed == 80 and a.results.duration_s == 57.30984311806969
    assert a.results.accept_len is None and a.results.accept_len_lifetime is None
    assert a.speculative is None  # the file does not say
    assert b.load.request_rate == 4.0 and b.load.concurrency == 8
    assert (b.load.input_len, b.load.output_len, b.load.dataset) == (512, 256, "random")
    # bench_serving's accept_length is the server's lifetime average, not this run's
    assert b.results.accept_len_lifetime == 2.61 and b.results.accept_len is None
    assert '"request_rate": 4.0' in b.raw


def test_jsonl_0_5_4(fixture_path):
    (r,) = import_file(fixture_path("bench_serving_0.5.4.jsonl")).results
    assert (r.load.concurrency, r.load.input_len, r.load.output_len) == (4, 2048, 512)
    assert r.results.output_tok_s == 664.25 and r.results.request_s == 1.2974
    assert r.results.accept_len_lifetime == 2.47
    assert r.results.e2e_ms.median == 3070.12 and r.results.tpot_ms.p99 == 6.01


def test_jsonl_0_5_23_server_info_tag_nan_and_a_torn_line(fixture_path):
    parsed = import_file(fixture_path("bench_serving_0.5.23.jsonl"))
    base, spec = parsed.results
    assert [str(p).rsplit("/", 1)[1][:30] for p in parsed.problems] == ["bench_serving_0.5.23.jsonl:3: "]
    assert "not a JSON record" in parsed.problems[0].message
    assert base.label == "baseline" and base.is_baseline
    assert base.config.target_model == "glm-5" and base.config.tp == 8 and base.config.cuda_graph is True
    assert base.config.sglang_version == "0.5.23"
    assert base.results.output_tok_s == 90.0 and base.results.total_tok_s == 270.0
    assert base.results.e2e_ms.p90 == 5701.2 and base.results.ttft_ms.p95 == 22.4
    assert base.load.dataset == "random-ids" and base.load.request_rate == math.inf
    assert spec.label == "eagle3-4s-5dt" and spec.speculative is True
    assert spec.config.algorithm == "EAGLE3" and spec.config.draft_model == "/models/glm5-eagle3-k25"
    assert (spec.config.num_steps, spec.config.topk, spec.config.num_draft_tokens) == (4, 1, 5)
    assert spec.results.accept_len_lifetime == 2.14 and spec.results.output_tok_s == 82.3
    assert spec.results.e2e_ms.mean == 6221.15  # beside "std_e2e_latency_ms": NaN


def test_nohup_with_two_padded_reports_and_their_arguments(fixture_path):
    parsed = import_file(fixture_path("nohup_bench_serving_0.5.23.out"))
    assert parsed.format == "bench_serving_report" and parsed.problems == []
    a, b = parsed.results
    assert (a.source_line, b.source_line) == (12, 61)
    assert a.source == "import:bench_serving_report"
    assert a.config.target_model == "zai-org/GLM-5-NVFP4" and a.label == "eagle3-5dt"
    assert (a.load.concurrency, a.load.num_prompts, a.load.input_len, a.load.output_len) == (1, 200, 1024, 512)
    assert a.load.dataset == "random" and a.load.request_rate == math.inf
    assert a.results.output_tok_s == 82.30 and a.results.total_tok_s == 246.90 and a.results.request_s == 0.16
    assert a.results.accept_len_lifetime == 2.14 and a.results.accept_len is None
    assert a.results.completed == 200 and a.results.duration_s == 1244.23
    assert a.results.e2e_ms.median == 6208.40 and a.results.ttft_ms.p99 == 288.37
    assert a.results.tpot_ms.p90 == 12.31 and a.results.itl_ms.p95 == 25.61
    assert "Serving Benchmark Result" in a.raw and "Max ITL (ms):" in a.raw
    assert (b.load.concurrency, b.load.num_prompts) == (16, 400)
    assert b.label is None
    assert b.results.output_tok_s == 809.90 and b.results.accept_len_lifetime is None  # no Accept length line


def test_unpadded_report_reads_the_same_as_padded(fixture_path):
    text = fixture_path("nohup_bench_serving_0.5.23.out").read_text(encoding="utf-8")
    squeezed = re.sub(r" {2,}", " ", text)
    assert squeezed != text
    padded = parse_text(text, "nohup.out").results
    pasted = parse_text(squeezed, "nohup.out").results
    assert [r.results for r in pasted] == [r.results for r in padded]
    assert [r.load for r in pasted] == [r.load for r in padded]


def test_old_report_pasted_in_an_issue(fixture_path):
    parsed = import_file(fixture_path("issue_paste_0.4.txt"))
    assert parsed.problems == []
    off, on = parsed.results
    assert (off.source_line, on.source_line) == (6, 42)
    assert off.load.concurrency is None  # "Max reqeuest concurrency: not set" (the old typo)
    assert off.load.request_rate == math.inf
    assert off.results.output_tok_s == 285.88 and off.results.total_tok_s == 598.56
    assert off.results.e2e_ms.median == 45120.33 and off.results.e2e_ms.p90 is None
    assert off.results.ttft_ms.p99 == 4410.09 and off.results.itl_ms.p95 == 251.60  # "Inter-token Latency"
    assert off.results.accept_len_lifetime is None
    assert on.results.accept_len_lifetime == 3.07 and on.results.itl_ms.mean == 80.11
    assert on.results.completed == 80 and on.results.duration_s == 69.02


def test_report_cut_off_before_its_closing_line_still_counts():
    text = (
        "============ Serving Benchmark Result ============\n"
        "Backend: sglang\n"
        "Traffic request rate: 2.0\n"
        "Max request concurrency: 8\n"
        "Output token throughput (tok/s): 431.50\n"
        "Mean TTFT (ms): 55.10\n"
        "see the logs for the rest\n"
    )
    (r,) = parse_text(text, "paste.txt").results
    assert r.load.request_rate == 2.0 and r.load.concurrency == 8
    assert r.results.output_tok_s == 431.50 and r.results.ttft_ms.mean == 55.10


def test_report_without_throughput_is_a_problem_at_its_banner():
    text = "intro\n============ Serving Benchmark Result ============\nBackend: sglang\n" + "=" * 50 + "\n"
    parsed = parse_text(text, "x.out")
    assert parsed.results == []
    assert [(p.line, "Output token throughput" in p.message) for p in parsed.problems] == [(2, True)]


def test_bad_number_in_a_report_names_its_line():
    text = ("============ Serving Benchmark Result ============\n"
            "Output token throughput (tok/s): 12.5\n"
            "Mean TTFT (ms): fast\n" + "=" * 50 + "\n")
    parsed = parse_text(text, "x.out")
    assert parsed.results == []
    (p,) = parsed.problems
    assert p.line == 3 and "mean ttft (ms)" in p.message and "'fast'" in p.message
