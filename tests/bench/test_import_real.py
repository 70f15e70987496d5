"""Reports pasted in public issues (tests/bench/fixtures/real/README.md names each thread):
the tool is named from the report's own lines, vLLM's concurrency is kept, speculation is read
where the paste shows it, and what cannot be read is refused with the reason."""

from __future__ import annotations

import pytest

from backend.bench.importers import import_file
from backend.bench.records import NotABenchmark
from specdeck_types.bench import NO_SPECULATION, UNNAMED_SPECULATION


def _one(fixture_path, name):
    parsed = import_file(fixture_path(f"real/{name}"))
    assert len(parsed.results) == 1, parsed.problems
    return parsed.results[0]


@pytest.mark.parametrize("name, concurrency, tok_s", [
    ("vllm_pr51742_mtp.txt", 1, 184.07),
    ("vllm_pr51742_mtp_b.txt", 1, 371.88),
    ("vllm_pr36029_speedbench.txt", 32, 2541.04),
    ("vllm_pr35714_draft_model.txt", 1, 39.96),
    ("vllm_pr17202_benchmark_serving.txt", 1, 177.52),  # concurrency printed above the banner
])
def test_vllm_reports_are_vllm_with_their_concurrency(fixture_path, name, concurrency, tok_s):
    r = _one(fixture_path, name)
    assert r.tool == "vLLM bench serve" and r.format == "vllm_bench_serve_report"
    assert r.load.concurrency == concurrency and r.results.output_tok_s == tok_s


def test_vllm_speculative_section_shows_speculation(fixture_path):
    assert _one(fixture_path, "vllm_pr51742_mtp.txt").config.algorithm == UNNAMED_SPECULATION
    assert _one(fixture_path, "vllm_pr36029_speedbench.txt").config.algorithm == UNNAMED_SPECULATION
    assert _one(fixture_path, "vllm_pr35714_draft_model.txt").config.algorithm is None  # it does not say


@pytest.mark.parametrize("name", ["sglang_pr17098_mindspore_eagle3.txt", "sglang_issue6681_0.4.3.txt",
                                  "sglang_pr9812_oai_chat.txt", "sglang_pr26445_hisparse.txt"])
def test_sglang_reports_stay_sglang(fixture_path, name):
    r = _one(fixture_path, name)
    assert r.tool == "SGLang bench_serving" and r.format == "bench_serving_report"


def test_sglang_accept_length_and_launch_line(fixture_path):
    eagle = _one(fixture_path, "sglang_pr17098_mindspore_eagle3.txt")
    assert eagle.config.algorithm == UNNAMED_SPECULATION and eagle.results.accept_len_lifetime == 2.14
    assert eagle.load.concurrency == 8
    plain = _one(fixture_path, "sglang_issue6681_0.4.3.txt")  # launched without speculative flags
    assert plain.config.algorithm == NO_SPECULATION and plain.config.target_model == "Qwen/Qwen2.5-32B-Instruct"
    assert plain.config.tp == 2 and plain.load.concurrency == 512


def test_a_cut_report_is_refused_with_the_line_and_the_reason(fixture_path):
    parsed = import_file(fixture_path("real/vllm_issue33497_mtp.txt"))
    assert parsed.results == []
    assert [p.line for p in parsed.problems] == [30]
    assert "without 'Output token throughput" in parsed.problems[0].message


def test_sglang_mtbench_script_output_is_not_taken_for_specforge(fixture_path):
    with pytest.raises(NotABenchmark, match="none of .*token/s"):
        import_file(fixture_path("real/sglang_pr4247_mtbench_eagle.txt"))


def test_vllm_json_is_vllm():
    from backend.bench.importers import parse_text
    record = ('{"date": "20260201-101010", "endpoint_type": "vllm", "backend": "vllm", "label": null, '
              '"model_id": "deepseek-ai/DeepSeek-V3.2", "tokenizer_id": "deepseek-ai/DeepSeek-V3.2", '
              '"num_prompts": 128, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 8, '
              '"duration": 97.8, "completed": 128, "failed": 0, "request_throughput": 1.3, '
              '"output_throughput": 1309.2, "total_token_throughput": 2618.4, "mean_ttft_ms": 138.2, '
              '"median_ttft_ms": 132.9, "p99_ttft_ms": 723.1, "mean_e2el_ms": 6000.0, '
              '"spec_decode_acceptance_length": 1.62, "spec_decode_acceptance_rate": 62.0}')
    r = parse_text(record, "vllm.json").results[0]
    assert r.tool == "vLLM bench serve" and r.format == "vllm_bench_serve_json"
    assert r.load.concurrency == 8 and r.load.request_rate == float("inf") and r.load.num_prompts == 128
    assert r.results.accept_len == 1.62 and r.config.algorithm == UNNAMED_SPECULATION
    assert r.config.target_model == "deepseek-ai/DeepSeek-V3.2" and r.results.e2e_ms.mean == 6000.0
