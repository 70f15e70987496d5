"""bench_one_batch_server, bench_speculative, SpecForge and CSV files (values copied from the fixtures)."""

from __future__ import annotations

import pytest

from backend.bench.importers import import_file, parse_text
from backend.bench.records import BenchImportError


def test_one_batch_server_jsonl_old_and_new_keys(fixture_path):
    parsed = import_file(fixture_path("one_batch_server.jsonl"))
    assert parsed.format == "one_batch_server_jsonl" and parsed.problems == []
    a, b, c, d = parsed.results
    assert (a.load.concurrency, a.load.input_len, a.load.output_len) == (1, 1024, 512)
    assert a.results.output_tok_s == 82.79 and a.results.total_tok_s == 243.33 and a.results.duration_s == 6.3123
    assert a.label == "default" and a.results.accept_len_lifetime is None
    assert b.load.concurrency == 16 and b.results.output_tok_s == 775.41
    assert c.results.accept_len_lifetime == 2.09 and c.label == "glm5-eagle3"
    assert d.results.accept_len_lifetime is None  # "acc_length": -1 means none, not -1


def test_one_batch_server_printout_skips_warmup_and_repeated_table(fixture_path):
    parsed = import_file(fixture_path("one_batch_server_0.5.23.out"))
    assert parsed.format == "one_batch_server_report" and parsed.problems == []
    one, eight = parsed.results  # the warm-up case (batch size 16) and the table rows are not counted
    assert (one.source_line, eight.source_line) == (16, 25)
    assert (one.load.concurrency, one.load.input_len, one.load.output_len) == (1, 1024, 512)
    assert one.results.output_tok_s == 82.61 and one.results.duration_s == 6.21
    assert one.results.accept_len_lifetime == 2.11
    assert eight.results.output_tok_s == 513.37 and eight.results.accept_len_lifetime == 2.08


def test_one_batch_server_markdown_table_alone(fixture_path):
    parsed = import_file(fixture_path("one_batch_table_issue.md"))
    assert parsed.format == "one_batch_server_table"
    a, b = parsed.results
    assert (a.source_line, b.source_line) == (6, 7)
    assert (a.load.concurrency, a.load.input_len, a.load.output_len) == (1, 2048, 256)  # "Output lens: [256]"
    assert a.results.output_tok_s == 79.52 and a.results.itl_ms.mean == 12.58 and a.results.duration_s == 3.30
    assert a.results.accept_len_lifetime == 2.04
    assert b.load.concurrency == 32 and b.results.output_tok_s == 1024.40


def test_one_batch_server_table_of_0_5_23_headers():
    text = (
        "Input lens: [1024]. Output lens: [512].\n"
        "|   batch size |   input len |   latency (s) |   input throughput (tok/s) |   output throughput (tok/s) |"
        "   acc length |   ITL (ms) |   input cost ($/1M) |   output cost ($/1M) | cache hit rate   |\n"
        "|--------------|-------------|---------------|----------------------------|-----------------------------|"
        "--------------|------------|---------------------|----------------------|------------------|\n"
        "|            4 |        1024 |          7.10 |                   12001.20 |                      300.44 |"
        "          n/a |      13.31 |                0.16 |                 1.85 | n/a              |\n"
    )
    (r,) = parse_text(text, "report.md").results
    assert (r.load.concurrency, r.load.input_len, r.load.output_len) == (4, 1024, 512)
    assert r.results.output_tok_s == 300.44 and r.results.accept_len_lifetime is None


def test_bench_speculative_jsonl(fixture_path):
    base, spec, wide = import_file(fixture_path("bench_speculative.jsonl")).results
    assert base.is_baseline and base.config.num_steps is None  # steps 0 = no speculation
    assert base.results.output_tok_s == 90.009 and base.results.accept_len_lifetime is None
    assert spec.config.algorithm == "EAGLE"  # what the script launches
    assert (spec.config.num_steps, spec.config.topk, spec.config.num_draft_tokens) == (4, 1, 5)
    assert spec.results.output_tok_s == 82.288 and spec.results.accept_len_lifetime == 2.1
    # speed is one sequence's; a batch of 4 decodes 4 sequences per step
    assert wide.load.concurrency == 4 and wide.results.output_tok_s == pytest.approx(4 * 93.095)


def test_specforge_output_json(fixture_path):
    parsed = import_file(fixture_path("specforge_benchmark.json"))
    (r,) = parsed.results
    assert parsed.format == "specforge_json" and r.source_line == 1
    assert r.results.output_tok_s == 82.2979 and r.results.accept_len == 2.087  # of this run
    assert r.load.dataset == "mt-bench" and r.load.num_prompts == 80
    assert r.results.completed == 80 and r.results.duration_s == 412.9031


def test_specforge_printout(fixture_path):
    gsm, he = import_file(fixture_path("specforge_benchmark.out")).results
    assert (gsm.source_line, he.source_line) == (2, 7)  # the Backend: lines
    assert gsm.load.dataset == "gsm8k" and gsm.load.num_prompts == 200
    assert gsm.results.output_tok_s == 541.22 and gsm.results.accept_len == 2.314
    assert he.load.dataset == "humaneval" and he.results.output_tok_s == 498.07 and he.results.accept_len is None


def test_specforge_bench_eagle3_results_document(fixture_path):
    parsed = import_file(fixture_path("specforge_bench_eagle3_results.jsonl"))
    assert parsed.format == "specforge_bench_eagle3" and parsed.problems == []
    base, spec, gsm = parsed.results
    assert [r.source_line for r in parsed.results] == [10, 28, 48]  # where each metrics object starts
    assert base.is_baseline and base.config.draft_model is None
    assert base.results.output_tok_s == 89.71 and base.load.dataset == "mtbench"
    assert spec.config.algorithm == "EAGLE3" and spec.config.draft_model == "/models/glm5-eagle3-k25"
    assert (spec.config.num_steps, spec.config.topk, spec.config.num_draft_tokens) == (4, 1, 5)
    assert spec.results.output_tok_s == 82.27 and spec.results.accept_len == 2.11
    assert spec.load.concurrency == 1 and spec.load.num_prompts == 80
    assert gsm.load.dataset == "gsm8k" and gsm.results.accept_len == 2.36 and gsm.results.duration_s == 1502.881
    assert '"output_throughput": 82.27' in spec.raw


def test_csv_of_hand_entered_numbers(fixture_path):
    parsed = import_file(fixture_path("manual.csv"))
    base, eagle, other = parsed.results
    assert [r.source_line for r in parsed.results] == [3, 4, 5]
    assert base.is_baseline and base.server == "glm5" and base.results.output_tok_s == 90.0
    assert base.config.cuda_graph is True and base.results.ttft_ms.p99 == 24.0
    assert base.started_at == 1773480600.0  # 2026-03-14T09:30:00Z
    assert eagle.started_at == 1773482700.0  # 2026-03-14T10:05:00, no zone: UTC
    assert other.started_at == 1773484200.0  # epoch seconds
    assert eagle.config.algorithm == "EAGLE3" and eagle.config.num_draft_tokens == 5
    assert eagle.results.accept_len == 2.1 and eagle.results.ttft_ms.p99 is None  # "N/A"
    assert other.results.output_tok_s == 50.5 and other.results.accept_len is None
    (p,) = parsed.problems  # the "maybe" row is skipped, named by line and field
    assert (p.line, p.field) == (6, "cuda_graph")


def test_csv_unknown_column_is_named(tmp_path):
    f = tmp_path / "typo.csv"
    f.write_text("server,output_toks,accept_len\nx,1,2\n", encoding="utf-8")
    with pytest.raises(BenchImportError) as exc:
        import_file(f)
    assert exc.value.line == 1 and exc.value.field == "output_toks"
    assert str(exc.value).startswith(f"{f}:1: output_toks: unknown column")


def test_a_csv_file_with_only_misspelt_figures_names_the_column(tmp_path):
    f = tmp_path / "notes.csv"
    f.write_text("# from the lab book\nserver,tok_per_s\nx,80\n", encoding="utf-8")
    with pytest.raises(BenchImportError) as exc:
        import_file(f)
    assert (exc.value.line, exc.value.field) == (2, "tok_per_s")


def test_csv_row_without_a_figure_is_skipped(tmp_path):
    f = tmp_path / "h.csv"
    f.write_text("server,output_tok_s,accept_len\na,,\nb,12.5,\n", encoding="utf-8")
    parsed = import_file(f)
    assert [r.server for r in parsed.results] == ["b"]
    assert [(p.line, p.field) for p in parsed.problems] == [(2, "output_tok_s")]
