"""``acceptance_rate_i`` is a probability: a value outside 0..1 is dropped and named wherever it is
read (each generation's console lines, MLflow files), never charted or used in a prediction."""

from __future__ import annotations

import pytest

from backend.train.accept import predictions
from backend.train.logparse import BadTrainLine, check_value, parse_line
from backend.train.trackers import read_mlflow_run


@pytest.mark.parametrize("name", ["acceptance_rate", "acceptance_rate_0", "acceptance_rate_6", "acceptance_rate_12",
                                  "train/acceptance_rate_3", "eval/acceptance_rate_1"])
def test_a_rate_outside_0_1_is_refused(name):
    for bad in (1.2, -0.1, "1.0001", 100.0):
        with pytest.raises(ValueError, match="outside 0..1"):
            check_value(name, bad)
    assert check_value(name, 0.0) == 0.0 and check_value(name, "1.0") == 1.0 and check_value(name, 0.52) == 0.52


def test_gen3_dict_drops_the_bad_rates_and_keeps_the_rest():
    (r,) = parse_line("step 300: {'loss': 2.1, 'acc_0': 0.6, 'acceptance_rate_0': 1.3, 'acceptance_rate_1': -0.2, "
                      "'acceptance_rate_2': 0.4}")
    assert r.metrics == {"loss": 2.1, "acc_0": 0.6, "acceptance_rate_2": 0.4}
    assert sorted(r.rejected) == ["acceptance_rate_0: 1.3 is outside 0..1",
                                  "acceptance_rate_1: -0.2 is outside 0..1"]
    # no a0: no prediction from acceptance_rate (never one from 1.3)
    assert predictions([r], "acceptance_rate") == []


def test_gen3_list_of_rates_drops_the_bad_position():
    (r,) = parse_line("step 400: {'eval/acceptance_rate': [0.7, 1.4, 0.3]}")
    assert r.metrics == {"acceptance_rate_0": 0.7, "acceptance_rate_2": 0.3}
    assert r.rejected == ("acceptance_rate_1: 1.4 is outside 0..1",)


@pytest.mark.parametrize("line", [
    "Eval - Step 500 [501/10], position 3,  Acceptance Rate: 1.25",
    "Train Epoch [2/6], position 1,  Acceptance Rate: 1.5",
])
def test_gen1_and_gen2_lines_with_a_rate_above_1_are_refused(line):
    with pytest.raises(BadTrainLine, match="outside 0..1"):
        parse_line(line)


def test_gen2_bar_drops_a_bad_rate():
    (r,) = parse_line("Training Epoch 0:  27%|▌ | 457/1667 [09:28<21:09,  1.05s/it, loss=1.11, acc=0.34, "
                      "acceptance_rate=1.52, time=1.05s, grad_norm=0.87]")
    assert "acceptance_rate" not in r.metrics and r.metrics["acc"] == 0.34
    assert r.rejected == ("acceptance_rate: 1.52 is outside 0..1",)


def test_mlflow_rates_outside_0_1_are_problems(tmp_path):
    m = tmp_path / "metrics" / "train"
    m.mkdir(parents=True)
    (m / "acceptance_rate_0").write_text("1700000000000 0.5 10\n1700000060000 1.5 20\n")
    recs, problems = read_mlflow_run(tmp_path)
    assert [(r.step, r.metrics) for r in recs] == [(10, {"acceptance_rate_0": 0.5})]
    assert len(problems) == 1 and problems[0].endswith("acceptance_rate_0:2: acceptance_rate_0: 1.5 is outside 0..1")
