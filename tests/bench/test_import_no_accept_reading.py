"""SGLang's tools write 0 (or -1) for the accept length when the server had no reading (no
speculation, nothing decoded yet).  Every importer stores that as no value, never as an accept
length of 0, so the list shows N/A and break-even finds no accept length to go by."""

from __future__ import annotations

import json

import pytest

from backend.bench.breakeven import pair_with_baselines
from backend.bench.importers import parse_text
from backend.bench.records import positive
from state.bench import BenchStore
from state.store import Store


def _serving_record(accept_length) -> str:
    return json.dumps({"backend": "sglang", "dataset_name": "random", "request_rate": 1e999, "max_concurrency": 4,
                       "random_input_len": 1024, "random_output_len": 512, "duration": 60.0, "completed": 200,
                       "request_throughput": 3.3, "output_throughput": 300.5, "mean_ttft_ms": 40.0,
                       "median_e2e_latency_ms": 900.0, "accept_length": accept_length,
                       "server_info": {"speculative_algorithm": "EAGLE3", "served_model_name": "glm5"}})


REPORT = """\
============ Serving Benchmark Result ============
Max request concurrency:                 4
Output token throughput (tok/s):         300.50
Accept length:                           {value}
==================================================
"""


def _one_of_each(value: str) -> dict[str, str]:
    """One file of each format that carries an accept length, all with ``value`` there."""
    return {
        "serving.jsonl": _serving_record(float(value)),
        "serving.out": REPORT.format(value=value),
        "one_batch.jsonl": json.dumps({"run_name": "x", "batch_size": 1, "input_len": 1024, "output_len": 512,
                                       "latency": 6.3, "output_throughput": 82.8, "overall_throughput": 243.3,
                                       "acc_length": float(value)}),
        "one_batch.out": (f"batch size: 1\ninput_len: 1024\noutput_len: 512\nlatency: 6.21 s\n"
                          f"output throughput: 82.61 tok/s\nacc_length: {value}\n"),
        "specforge.json": json.dumps({"backend": "sglang", "dataset": "mt-bench", "samples": 80,
                                      "throughput_tokens_per_second": 82.3, "average_acceptance_length": float(value)},
                                     indent=2),
        "specforge.out": (f"Backend: sglang\nDataset: gsm8k (200 completed prompts/turns)\n"
                          f"Output throughput: 541.22 tok/s\nAverage acceptance length: {value}\n"),
    }


def _accept(r):
    return r.results.accept_len if r.results.accept_len is not None else r.results.accept_len_lifetime


@pytest.mark.parametrize("name", sorted(_one_of_each("0")))
@pytest.mark.parametrize("value", ["0", "0.00", "-1"])
def test_no_reading_is_stored_as_no_value(name, value):
    parsed = parse_text(_one_of_each(value)[name], name)
    assert parsed.problems == []
    (r,) = parsed.results
    assert r.results.accept_len is None and r.results.accept_len_lifetime is None
    assert r.accept_len is None


@pytest.mark.parametrize("name", sorted(_one_of_each("0")))
def test_a_reading_is_kept(name):
    (r,) = parse_text(_one_of_each("2.14")[name], name).results
    assert _accept(r) == 2.14


def test_positive():
    assert positive(0.0) is None and positive(-1.0) is None and positive(None) is None
    assert positive(1.0) == 1.0 and positive(0.5) == 0.5


def test_stored_and_paired_as_no_value(tmp_path):
    """The run without a reading goes through the store as no value, and break-even says so
    instead of building a model on accept_len 0."""
    (spec,) = parse_text(_serving_record(0.0), "serving.jsonl").results
    base_line = json.loads(_serving_record(-1.0))
    base_line["server_info"] = {"served_model_name": "glm5"}  # no speculative_algorithm: a baseline
    base_line["output_throughput"] = 280.0
    (base,) = parse_text(json.dumps(base_line), "base.jsonl").results
    with Store(tmp_path / "state.db") as store:
        bench = BenchStore(store)
        bench.insert(spec)
        bench.insert(base)
        stored = bench.list()
    got = next(r for r in stored if r.speculative)
    assert got.results.accept_len is None and got.results.accept_len_lifetime is None
    (p,) = pair_with_baselines(stored)
    assert p.baseline is not None and p.baseline.results.output_tok_s == 280.0
    assert p.model is None and p.reason == "accept_len of this run was not recorded"
