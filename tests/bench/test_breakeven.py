"""The break-even model on the seeds' numbers (hand-computed below) and the demo history."""

from __future__ import annotations

import pytest

from backend.bench.breakeven import ASSUMPTIONS, BreakEven, explain, pair_with_baselines
from backend.bench.demo_history import install_demo_history
from backend.flows.demo import write_demo_workspace
from state.bench import BenchStore
from state.store import Store

# Worked by hand: 1 / 90 s = 11.11 ms; 2.1 / 82.3 s = 25.52 ms; 25.52 / 11.11 = 2.30;
# at accept_len 3.0 the same round gives 3.0 / 25.52 ms = 117.6 tok/s; 82.3 / 90 = 0.914.
SEEDS = BreakEven(baseline_tok_s=90.0, spec_tok_s=82.3, accept_len=2.1)


def test_seeds_numbers():
    assert SEEDS.plain_step_s * 1000 == pytest.approx(11.11, abs=0.01)
    assert SEEDS.round_s * 1000 == pytest.approx(25.52, abs=0.01)
    assert SEEDS.cost_ratio == pytest.approx(2.30, abs=0.005)
    assert SEEDS.break_even_accept_len == SEEDS.cost_ratio
    assert SEEDS.predicted_tok_s(3.0) == pytest.approx(117.6, abs=0.05)
    assert SEEDS.predicted_tok_s(2.1) == pytest.approx(82.3)
    assert SEEDS.speedup == pytest.approx(0.914, abs=0.001)
    assert not SEEDS.pays


def test_seeds_explanation_in_the_pages_words():
    text = explain(SEEDS, better_accept_lens=[3.0])
    for phrase in (
        "A speculative round took 2.10 / 82.3 s = 25.5 ms against 11.1 ms for a plain decode step (1 / 90.0 s)",
        "so a round cost 2.3 plain steps and accept_len 2.10 could not pay for it",
        "Break-even is accept_len 2.30.",
        "a better draft (more and closer training data raise accept_len)",
        "a cheaper round (fewer draft tokens or steps)",
        "a round would have to take under 23.3 ms to pay at accept_len 2.10",  # 2.1 x 11.11 ms
        "At accept_len 3.00 this round would give 117.6 tok/s.",
    ):
        assert phrase in text, phrase
    assert len(ASSUMPTIONS) >= 3


def test_a_round_that_pays():
    # 2.8 / 135 s = 20.74 ms = 1.87 plain steps of 11.11 ms; 135 / 90 = 1.50x
    m = BreakEven(90.0, 135.0, 2.8)
    assert m.pays and m.cost_ratio == pytest.approx(1.867, abs=0.001)
    text = explain(m)
    assert "accept_len 2.80 paid for it: 1.50× the baseline" in text
    assert "Break-even is accept_len 1.87." in text


def test_concurrency_scales_the_step_not_the_ratio():
    # 16 sequences: a step is 16 / 900 s = 17.8 ms; a round 16 x 2.1 / 823 s = 40.8 ms
    m = BreakEven(900.0, 823.0, 2.1, concurrency=16)
    assert m.plain_step_s * 1000 == pytest.approx(17.78, abs=0.01)
    assert m.round_s * 1000 == pytest.approx(40.83, abs=0.01)
    assert m.cost_ratio == pytest.approx(SEEDS.cost_ratio)
    assert "(at concurrency 16, each step serves 16 sequences)" in explain(m)


@pytest.mark.parametrize("args", [(0, 82.3, 2.1), (90, -1, 2.1), (90, 82.3, None), (90, 82.3, float("nan"))])
def test_bad_inputs_are_refused(args):
    with pytest.raises(ValueError):
        BreakEven(*args)


def test_demo_workspace_ships_the_seeds_history(tmp_path):
    write_demo_workspace(tmp_path)
    assert (tmp_path / "bench" / "history.csv").exists()
    with Store(tmp_path / "state.db") as store:
        results = BenchStore(store).list()
    assert [(r.config.algorithm, r.results.output_tok_s, r.results.accept_len) for r in results] == [
        ("NONE", 90.0, None), ("EAGLE", None, 1.0), ("EAGLE3", 82.3, 2.1), ("EAGLE3", 50.5, None),
    ]
    assert results[2].config.cuda_graph is True and results[2].config.num_draft_tokens == 5
    assert {r.server for r in results} == {"glm5"} and {r.load.concurrency for r in results} == {1}
    pairs = pair_with_baselines(results)
    assert [p.run.results.output_tok_s for p in pairs] == [None, 82.3, 50.5]
    flag, eagle3, other = pairs
    assert flag.model is None and "tok/s of this run was not recorded" in flag.reason
    assert other.model is None and "accept_len of this run was not recorded" in other.reason
    assert eagle3.baseline.results.output_tok_s == 90.0
    assert eagle3.model.cost_ratio == pytest.approx(2.30, abs=0.005)
    assert install_demo_history(tmp_path) == 0  # importing again adds nothing


def test_no_baseline_at_that_load():
    from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult

    base = BenchResult("run", BenchConfig(algorithm="NONE"), BenchLoad(concurrency=1), BenchFigures(output_tok_s=90),
                       server="s")
    spec = BenchResult("run", BenchConfig(algorithm="EAGLE3"), BenchLoad(concurrency=8),
                       BenchFigures(output_tok_s=500, accept_len=2.0), server="s")
    (p,) = pair_with_baselines([base, spec])
    assert p.baseline is None and p.reason == "no baseline of this server at concurrency 8 and the same lengths"
