"""A speculative run is only set against a baseline of the same server at the same load: the same
concurrency and the same input and output lengths (break-even and the live comparison alike)."""

from __future__ import annotations

import calendar

import pytest

from backend.bench.baseline import choose_baseline, target_names
from backend.bench.breakeven import pair_with_baselines
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult

NOV29 = calendar.timegm((2026, 11, 29, 12, 0, 0))
DEC01 = calendar.timegm((2026, 12, 1, 12, 0, 0))


def run(tok_s, *, algorithm="NONE", server="glm5", concurrency=4, input_len=1024, output_len=512, accept_len=None,
        started=NOV29, id=1, target=None) -> BenchResult:
    return BenchResult(source="run", server=server, id=id, started_at=started,
                       config=BenchConfig(algorithm=algorithm, target_model=target),
                       load=BenchLoad(concurrency=concurrency, input_len=input_len, output_len=output_len),
                       results=BenchFigures(output_tok_s=tok_s, accept_len=accept_len))


SPEC = run(300.0, algorithm="EAGLE3", accept_len=2.5, started=DEC01, id=10)


def test_the_baseline_at_the_runs_lengths_is_chosen_over_newer_ones_at_other_lengths():
    stored = [
        run(250.0, id=1),                                          # the same load, oldest
        run(400.0, output_len=128, started=DEC01, id=2),           # other output length, newer
        run(380.0, input_len=2048, started=DEC01, id=3),           # other input length, newer
        run(390.0, input_len=512, output_len=1024, started=DEC01, id=4),  # the lengths swapped
        SPEC,
    ]
    (p,) = pair_with_baselines(stored)
    assert p.baseline is not None and p.baseline.id == 1
    assert p.model.baseline_tok_s == 250.0
    # 4 × 2.5 / 300 s = 33.3 ms a round against 4 / 250 s = 16.0 ms a step: 2.08 plain steps
    assert p.model.cost_ratio == pytest.approx(2.0833, abs=1e-4)
    assert p.model.concurrency == 4


@pytest.mark.parametrize("other", [
    {"output_len": 128},
    {"input_len": 2048},
    {"input_len": 512, "output_len": 1024},
    {"concurrency": 8},
    {"concurrency": 1},
])
def test_a_baseline_at_another_load_is_not_paired(other):
    (p,) = pair_with_baselines([run(250.0, **other), SPEC])
    assert p.baseline is None and p.model is None
    assert p.reason == "no baseline of this server at concurrency 4 and the same lengths"


def test_a_baseline_of_another_server_is_not_paired():
    (p,) = pair_with_baselines([run(250.0, server="llama"), SPEC])
    assert p.baseline is None and p.model is None
    # without server names, the target model decides
    anon = [run(250.0, server=None, target="zai-org/GLM-5"), run(240.0, server=None, target="other/model", id=2,
                                                                    started=DEC01)]
    spec = run(300.0, algorithm="EAGLE3", accept_len=2.5, server=None, target="zai-org/GLM-5", id=10)
    (q,) = pair_with_baselines(anon + [spec])
    assert q.baseline.id == 1


NAMES = target_names("/models/GLM-5", None)


@pytest.mark.parametrize("lengths, chosen", [
    ((1024, 512), 1),   # both lengths match
    ((2048, 512), 3),   # only the input length differs from baseline 1
    ((1024, 128), 2),   # only the output length differs from baseline 1
    ((4096, 4096), None),
])
def test_the_live_comparison_leaves_out_a_baseline_that_differs_in_one_length(lengths, chosen):
    stored = [run(250.0, target="GLM-5", id=1),
              run(400.0, target="GLM-5", output_len=128, id=2),
              run(380.0, target="GLM-5", input_len=2048, id=3)]
    c = choose_baseline(stored, server="glm5", names=NAMES, running=4, input_len=lengths[0], output_len=lengths[1])
    assert (c.result.id if c.result is not None else None) == chosen
