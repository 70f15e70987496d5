"""Files that are not benchmarks, and broken lines: clear errors naming the file and line."""

from __future__ import annotations

import json

import pytest

from backend.bench.importers import import_file, parse_text
from backend.bench.records import BenchImportError, NotABenchmark


def test_jsonl_of_something_else(fixture_path):
    with pytest.raises(NotABenchmark) as exc:
        import_file(fixture_path("not_a_benchmark.jsonl"))
    assert exc.value.line == 1
    assert str(exc.value).startswith(f"{fixture_path('not_a_benchmark.jsonl')}:1: ")
    assert "bench_serving" in str(exc.value)


def test_server_log_is_not_a_benchmark(fixture_path):
    with pytest.raises(NotABenchmark) as exc:
        import_file(fixture_path("not_a_benchmark.log"))
    assert exc.value.line == 2  # the first line with text


def test_empty_file(tmp_path):
    f = tmp_path / "empty.jsonl"
    f.write_text("\n\n", encoding="utf-8")
    with pytest.raises(NotABenchmark, match=r"empty\.jsonl:1: the file is empty"):
        import_file(f)


def test_binary_file_names_the_line_of_the_bad_byte(tmp_path):
    f = tmp_path / "blob.bin"
    f.write_bytes(b"one\ntwo\n\xff\xfe three")
    with pytest.raises(NotABenchmark) as exc:
        import_file(f)
    assert exc.value.line == 3 and "not a text file" in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(BenchImportError, match="cannot be read"):
        import_file(tmp_path / "nope.jsonl")


def test_json_document_of_another_kind():
    with pytest.raises(NotABenchmark) as exc:
        parse_text('\n{\n  "train_loss": 0.4,\n  "epoch": 3\n}\n', "metrics.json")
    assert exc.value.line == 2


def test_broken_and_foreign_lines_are_skipped_the_rest_imported():
    good = ('{"backend": "sglang", "dataset_name": "random", "request_rate": Infinity, "max_concurrency": 2, '
            '"random_input_len": 100, "random_output_len": 50, "output_throughput": 123.4, "mean_ttft_ms": 9.5, '
            '"completed": 10}')
    text = "\n".join([good, '{"backend": "sglang", "output_thr', '{"hello": 1}', good.replace("123.4", '"fast"')])
    parsed = parse_text(text, "mixed.jsonl")
    assert [r.results.output_tok_s for r in parsed.results] == [123.4]
    assert [p.line for p in parsed.problems] == [2, 4, 3]
    assert "output_throughput is 'fast'" in parsed.problems[1].message


def test_a_value_of_the_wrong_type_names_the_field():
    rec = ('{"backend": "sglang", "max_concurrency": "lots", "output_throughput": 1.0, "mean_ttft_ms": 1.0}')
    parsed = parse_text(rec + "\n" + rec.replace('"lots"', "4") + "\n", "f.jsonl")
    assert len(parsed.results) == 1
    assert parsed.problems[0].line == 1 and "max_concurrency" in parsed.problems[0].message


def test_output_details_lists_are_left_out_of_the_stored_copy():
    rec = {"backend": "sglang", "max_concurrency": 1, "output_throughput": 50.0, "mean_ttft_ms": 3.0,
           "generated_texts": ["word " * 50] * 400, "itls": [[0.01] * 100] * 400}
    line = json.dumps(rec)
    assert len(line) > 64 * 1024
    (r,) = parse_text(line + "\n" + line.replace("50.0", "51.0") + "\n", "details.jsonl").results[:1]
    assert r.results.output_tok_s == 50.0
    assert len(r.raw) < 1000 and '"output_throughput": 50.0' in r.raw
    assert "left out of this copy: generated_texts, itls" in r.raw


def test_a_file_over_the_read_limit_is_not_read(tmp_path):
    f = tmp_path / "nohup.out"
    with open(f, "wb") as fh:
        fh.write(b"Serving Benchmark Result\n")
        fh.truncate(1 << 30)  # sparse: no disk used
    with pytest.raises(BenchImportError) as exc:
        import_file(f)
    assert str(exc.value) == f"{f}:0: 1 GiB, over the 64 MiB read limit for a benchmark file; not read"
