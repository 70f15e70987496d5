"""SpecForge's own benchmark output (tests/bench/fixtures/specforge, written from the writers in
SpecForge's benchmarks/ folder): each layout imports with its dataset, load and speculation."""

from __future__ import annotations

from backend.bench.importers import import_file, parse_text
from specdeck_types.bench import NO_SPECULATION, UNNAMED_SPECULATION


def _rows(fixture_path, name):
    parsed = import_file(fixture_path(f"specforge/{name}"))
    assert parsed.problems == []
    return [(r.load.dataset, r.load.concurrency, r.results.output_tok_s, r.config.algorithm, r.config.num_steps,
             r.accept_len) for r in parsed.results], parsed


def test_bench_eagle3_results_file(fixture_path):
    rows, parsed = _rows(fixture_path, "bench_eagle3_results.jsonl")
    assert rows == [("mtbench", 1, 158.3, NO_SPECULATION, None, 1.0), ("mtbench", 1, 311.7, "EAGLE3", 3, 3.12),
                    ("humaneval", 1, 160.1, NO_SPECULATION, None, 1.0)]
    assert {r.tool for r in parsed.results} == {"SpecForge benchmarks/bench_eagle3.py"}


def test_bench_eagle3_without_its_own_server(fixture_path):
    rows, _ = _rows(fixture_path, "bench_eagle3_skip_launch.jsonl")
    assert rows == [("gsm8k", 8, 1210.4, UNNAMED_SPECULATION, None, 3.41)]


def test_bench_model_speedup_records(fixture_path):
    rows, parsed = _rows(fixture_path, "bench_model_speedup.jsonl")
    assert rows == [("mtbench", 1, 161.32, NO_SPECULATION, None, None), ("mtbench", 1, 298.4, "EAGLE3", 3, 3.05),
                    ("humaneval", 1, 330.9, "EAGLE3", 3, 3.61)]
    assert parsed.format == "specforge_speedup_jsonl"


def test_run_mtbench_console_with_its_launch_line(fixture_path):
    rows, parsed = _rows(fixture_path, "run_mtbench_2025-08.out")
    assert rows == [("mtbench", 1, 1305.118, "EAGLE3", 3, 3.214)]  # "1,305.118": thousands separator
    r = parsed.results[0]
    assert r.config.target_model == "meta-llama/Llama-3.1-8B-Instruct" and r.load.num_prompts == 80
    assert r.config.draft_model == "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B" and r.source_line == 6


def test_run_humaneval_console_accept_length_one_does_not_say(fixture_path):
    rows, parsed = _rows(fixture_path, "run_humaneval_2025-08.out")
    assert rows == [("humaneval", 1, 171.204, None, None, 1.0)]
    assert parsed.results[0].results.duration_s == 100.442


def test_run_humaneval_average_lines(fixture_path):
    rows, _ = _rows(fixture_path, "run_humaneval_average.out")
    assert rows == [("humaneval", 4, 612.5, UNNAMED_SPECULATION, None, 3.377)]


def test_bench_eagle3_console_blocks(fixture_path):
    rows, parsed = _rows(fixture_path, "bench_eagle3_console.out")
    assert rows == [("mtbench", 1, 158.3, NO_SPECULATION, None, 1.0), ("mtbench", 1, 311.7, "EAGLE3", 3, 3.12),
                    ("humaneval", 1, 160.1, NO_SPECULATION, None, 1.0)]
    assert [r.source_line for r in parsed.results] == [5, 17, 28]


def test_speedup_lines_printed_without_a_server_of_its_own():
    text = ("bs=8:bench_name='mtbench' completion_tokens=19068 acc_length=3.05 duration=63.9s "
            "throughput=298.4 token/s\n")
    r = parse_text(text, "speedup.log").results[0]
    assert (r.load.dataset, r.load.concurrency, r.results.output_tok_s, r.accept_len, r.results.duration_s) == \
        ("mtbench", 8, 298.4, 3.05, 63.9)


def test_a_block_with_a_bad_figure_names_its_line():
    parsed = parse_text("Latency: 12.0 s\nOutput throughput: inf token/s\nAccept length: 2.0\n", "run.out")
    assert parsed.results == [] and [p.line for p in parsed.problems] == [2]
    assert "throughput is infinity" in parsed.problems[0].message
