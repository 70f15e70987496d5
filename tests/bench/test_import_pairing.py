"""Imported reports get a break-even: speculation is read from the file or given at import, and a run
pairs only with a baseline of the same target, dataset and load; where none does, the reason says why."""

from __future__ import annotations

import io
import json

from backend.bench import breakeven as be
from backend.bench.importers import import_file, parse_text
from backend.bench.intake import algorithm_choice, fill_in, store_files
from backend.cli import main
from specdeck_types.bench import NO_SPECULATION, UNNAMED_SPECULATION
from state.bench import BenchStore
from state.store import Store


def test_specforge_results_pair_per_dataset(fixture_path):
    results = import_file(fixture_path("specforge/bench_model_speedup.jsonl")).results
    results = [fill_in(r.with_id(i + 1), server="llama")[0] for i, r in enumerate(results)]  # one server
    pairs = be.pair_with_baselines(results)
    by_ds = {p.run.load.dataset: p for p in pairs}
    assert by_ds["mtbench"].baseline.load.dataset == "mtbench" and by_ds["mtbench"].model is not None
    assert round(by_ds["mtbench"].model.speedup, 3) == round(298.4 / 161.32, 3)
    # the humaneval run must not pair with the mtbench baseline
    assert by_ds["humaneval"].baseline is None and by_ds["humaneval"].model is None
    assert "other datasets (mtbench)" in by_ds["humaneval"].reason and "humaneval" in by_ds["humaneval"].reason


def test_the_sglang_issue_paste_pairs_after_import(fixture_path):
    # one file: a report without Accept length beside one with it, no launch lines
    results = import_file(fixture_path("issue_paste_0.4.txt")).results
    assert [r.config.algorithm for r in results] == [NO_SPECULATION, UNNAMED_SPECULATION]
    results = [r.with_id(i + 1) for i, r in enumerate(results)]
    results = [fill_in(r, server="h100")[0] for r in results]
    [p] = be.pair_with_baselines(results)
    assert p.model is not None and p.baseline.id == 1 and p.model.accept_len == 3.07


def test_a_vllm_run_without_a_baseline_says_why_and_counts_unknown_runs(fixture_path):
    spec = import_file(fixture_path("real/vllm_pr51742_mtp_b.txt")).results[0]
    plain = import_file(fixture_path("real/vllm_pr35714_draft_model.txt")).results[0]  # speculation unknown
    [p] = be.pair_with_baselines([fill_in(spec, server="a")[0], fill_in(plain, server="a")[0]])
    assert p.model is None and "no run without speculation" in p.reason
    assert "1 stored result do not record whether they speculated" in p.reason


def test_algorithm_given_at_import_fills_only_what_the_file_leaves_open(fixture_path):
    assert algorithm_choice("baseline") == NO_SPECULATION and algorithm_choice(" eagle3 ") == "EAGLE3"
    assert algorithm_choice("") is None
    plain = import_file(fixture_path("real/vllm_pr35714_draft_model.txt")).results[0]
    assert fill_in(plain, algorithm=NO_SPECULATION)[0].config.algorithm == NO_SPECULATION
    spec = import_file(fixture_path("real/vllm_pr51742_mtp.txt")).results[0]
    kept, note = fill_in(spec, algorithm=NO_SPECULATION)
    assert kept.config.algorithm == UNNAMED_SPECULATION and "shows speculation" in note
    named, note = fill_in(spec, algorithm="EAGLE3")
    assert named.config.algorithm == "EAGLE3" and note is None
    eagle = parse_text("Running benchmark mtbench with 5 prompts, batch size 1, steps 3, topk 1, "
                       "num_draft_tokens 4, subset None\nLatency: 1.0 s\nOutput throughput: 10.0 token/s\n"
                       "Accept length: 2.0\n", "x.out").results[0]
    assert fill_in(eagle, algorithm="EAGLE")[0].config.algorithm == "EAGLE3"


def test_page_intake_and_cli_take_the_algorithm(tmp_path, fixture_path):
    store = BenchStore(Store(tmp_path / "s.db"))
    data = fixture_path("real/vllm_pr35714_draft_model.txt").read_bytes()
    [o] = store_files(store, [("draft.txt", data, "pasted")], server="b200", algorithm=NO_SPECULATION)
    got = store.get(o.new[0])
    assert got.config.algorithm == NO_SPECULATION and got.server == "b200" and got.tool == "vLLM bench serve"

    ws = str(tmp_path / "ws")
    assert main(["init", ws], io.StringIO()) == 0
    out = io.StringIO()
    rc = main(["-w", ws, "bench", "import", "--json", "--algorithm", "none", "--server", "b200",
               str(fixture_path("real/vllm_pr35714_draft_model.txt"))], out, io.StringIO())
    row = json.loads(out.getvalue())
    assert rc == 0 and row["config"]["algorithm"] == NO_SPECULATION and row["tool"] == "vLLM bench serve"
    assert row["load"]["concurrency"] == 1
    err = io.StringIO()
    assert main(["-w", ws, "bench", "import", "--algorithm", "EAGLE;3", "x"], io.StringIO(), err) == 2
    assert "EAGLE;3" in err.getvalue()
