"""The sweep's check of the model, by hand: the error's sign says whether the model predicted more
or less than was measured, and "pays" whether a configuration beat the baseline."""

from __future__ import annotations

import pytest

from backend.bench.sweep_check import Measured, check, describe_row

# a round costs 1 + 0.3 x steps plain steps at top-k 1; baseline 90 tok/s.  b and c are measured
# as the model says (94.74, 79.20); a is measured at 100.0 where the model says 90 x 1.6 / 1.3 = 110.77
ROWS = [Measured("a", "1 step", 1, 2, 1, 100.0, 1.6, 90.0),
        Measured("b", "3 steps", 3, 4, 1, 90 * 2.0 / 1.9, 2.0, 90.0),
        Measured("c", "5 steps", 5, 6, 1, 90 * 2.2 / 2.5, 2.2, 90.0)]


def test_a_model_that_predicts_more_than_measured_errs_upwards():
    rows = {r.key: r for r in check(ROWS)}
    a = rows["a"]
    assert a.predicted_tok_s == pytest.approx(110.77, abs=0.01)
    assert a.error_pct == pytest.approx(10.77, abs=0.01)  # (110.77 - 100) / 100
    assert "the model predicted 110.8 tok/s (+11 %)" in describe_row(a.to_dict())
    # b's prediction now includes a's slower round: it predicts less than b measured
    assert rows["b"].error_pct < 0 and rows["b"].predicted_tok_s < rows["b"].measured_tok_s


def test_pays_when_faster_than_the_baseline():
    rows = {r.key: r for r in check(ROWS)}
    assert (rows["a"].pays, rows["b"].pays, rows["c"].pays) == (True, True, False)  # 100, 94.7, 79.2 against 90
