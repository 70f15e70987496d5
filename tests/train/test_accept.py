"""Predicted accept length 1 + a0 + a0·a1 + …, with hand-computed figures."""

from __future__ import annotations

import pytest

from backend.train.accept import metric_for, predicted_accept_length, predictions
from backend.train.logparse import parse_line
from backend.train.reader import TrainLogReader


@pytest.mark.parametrize("rates, steps, expected", [
    ([0.8, 0.6, 0.5], None, 2.52),      # 1 + 0.8 + 0.48 + 0.24
    ([0.8, 0.6, 0.5], 2, 2.28),         # 1 + 0.8 + 0.48: two draft steps cannot accept the third
    ([0.8, 0.6, 0.5], 0, 1.0),
    ([], None, 1.0),                    # only the bonus token
    ([1.0, 1.0, 1.0], None, 4.0),       # chain of 3 fully accepted: the cap of steps + 1
    ([0.0, 0.9], None, 1.0),            # nothing after a rejected first position
    ([0.5, 0.5, 0.5, 0.5], None, 1.9375),  # 1 + .5 + .25 + .125 + .0625
])
def test_formula(rates, steps, expected):
    assert predicted_accept_length(rates, steps) == pytest.approx(expected)


def test_rates_outside_0_1_are_refused():
    with pytest.raises(ValueError, match="position 1"):
        predicted_accept_length([0.5, 1.5])


def test_gen2_interval_lines_and_eval(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("Eval - Step 52 [53/2], position 0,  Acc: 0.60\n"
                   "Eval - Step 52 [53/2], position 1,  Acc: 0.40\n"
                   "Eval - Step 52 [53/2], position 2,  Acc: 0.20\n"
                   "Evaluating Epoch 0: 100%|██████████| 10/10 [00:05<00:00,  2.00it/s]\n"
                   "Eval - Step 100 [101/2], position 0,  Acc: 0.65\n", encoding="utf-8")
    recs = TrainLogReader(log).read_all()
    train = predictions(recs, "acc", split="train")
    assert [(p.step, p.rates) for p in train] == [(52, (0.60, 0.40, 0.20))]
    assert train[0].accept_length == pytest.approx(1.888)  # 1 + .6 + .24 + .048
    ev = predictions(recs, "acc", split="eval")
    assert [(p.step, p.positions, round(p.accept_length, 6)) for p in ev] == [(100, 1, 1.65)]


def test_gen3_dict_and_acceptance_rate():
    recs = parse_line("step 200: {'acc_0': 0.62, 'acc_1': 0.48, 'acceptance_rate_0': 0.5, 'acceptance_rate_1': 0.4}")
    [p] = predictions(recs, "acc")
    assert p.accept_length == pytest.approx(1.9176)  # 1 + .62 + .62*.48
    [q] = predictions(recs, "acceptance_rate")
    assert q.accept_length == pytest.approx(1.7)  # 1 + .5 + .2


def test_gen1_by_epoch():
    recs = (parse_line("Train Epoch [6/6], position 0,  Acc: 0.68")
            + parse_line("Train Epoch [6/6], position 1,  Acc: 0.50")
            + parse_line("Train Epoch [5/6], position 0,  Acc: 0.60"))
    got = [(p.epoch, p.step, round(p.accept_length, 6)) for p in predictions(recs)]
    assert got == [(5, None, 2.02), (4, None, 1.6)]  # 1 + .68 + .34; 1 + .6


def test_missing_position_stops_the_product():
    recs = parse_line("step 3: {'acc_0': 0.5, 'acc_2': 0.9}")
    [p] = predictions(recs)
    assert p.rates == (0.5,) and p.accept_length == pytest.approx(1.5)
    assert predictions(parse_line("step 3: {'acc_1': 0.5}")) == []  # no a0: no prediction, not 1.0


def test_metric_choice_per_generation():
    assert metric_for(2, 0.0)[0] == "acc"
    assert metric_for(2, 0.7, seen=["acc_0", "acceptance_rate_0"])[0] == "acceptance_rate"
    name, why = metric_for(1, 0.7, seen=["acc_0", "ploss_0"])
    assert name == "acc" and "Gen-1" in why


def test_metric_choice_reads_an_iterator_once():
    assert metric_for(2, 1.0, seen=iter(["acceptance_rate_0"]))[0] == "acceptance_rate"
    assert metric_for(3, 1.0)[0] == "acceptance_rate"  # Gen-3 always logs it
