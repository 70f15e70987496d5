"""Which stored baseline a live server is compared with (backend.bench.baseline, pure)."""

from __future__ import annotations

import calendar

import pytest

from backend.bench.baseline import BaselineChoice, choose_baseline, target_names
from backend.sglang.livefigures import measured_figures
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult

# noon UTC: the same local date in every time zone from UTC-11 to UTC+11
NOV29 = calendar.timegm((2026, 11, 29, 12, 0, 0))
NOV30 = calendar.timegm((2026, 11, 30, 12, 0, 0))
DEC01 = calendar.timegm((2026, 12, 1, 12, 0, 0))

TARGET = "/models/Llama-3.1-70B-Instruct"
NAMES = target_names(TARGET, "llama-3.1-70b")


def result(tok_s, concurrency, *, algorithm="NONE", target="Llama-3.1-70B-Instruct", server="other",
           started=NOV29, created=None, input_len=None, output_len=None, id=1) -> BenchResult:
    return BenchResult(source="run", server=server, id=id, started_at=started, created_at=created,
                       config=BenchConfig(target_model=target, algorithm=algorithm),
                       load=BenchLoad(concurrency=concurrency, input_len=input_len, output_len=output_len),
                       results=BenchFigures(output_tok_s=tok_s))


def choose(results, running, **kw) -> BaselineChoice:
    return choose_baseline(results, server="srv", names=NAMES, running=running, **kw)


STORED = [result(90.0, 1, id=1), result(620.0, 16, id=2),
          result(82.3, 1, algorithm="EAGLE3", id=3),  # speculative: never a baseline
          result(400.0, 4, target="GLM-5-NVFP4", id=4)]  # another target


# running now -> (chosen concurrency, its tok/s, exact)
@pytest.mark.parametrize("running, conc, tok_s, exact", [
    (1, 1, 90.0, True),
    (16, 16, 620.0, True),
    (12, 16, 620.0, False),   # 4 from 16, 11 from 1
    (2, 1, 90.0, False),
    (4, 1, 90.0, False),      # the GLM baseline at 4 is another target's
    (40, 16, 620.0, False),
])
def test_nearest_measured_concurrency_of_the_same_target(running, conc, tok_s, exact):
    c = choose(STORED, running)
    assert (c.concurrency, c.tok_s, c.exact) == (conc, tok_s, exact)
    assert c.measured == (1, 16)


def test_the_sentence_names_the_value_concurrency_and_date():
    assert choose(STORED, 1).label == "baseline 90.0 tok/s measured at concurrency 1, 2026-11-29"
    assert choose(STORED, 12).label == ("baseline 620.0 tok/s measured at concurrency 16, 2026-11-29 "
                                       "(nearest measured: 16, the server runs 12)")


def test_a_tie_goes_to_the_higher_concurrency():
    c = choose([result(90.0, 1), result(300.0, 9, id=2)], 5)
    assert c.concurrency == 9 and not c.exact


def test_the_newest_at_that_concurrency_wins_and_hand_entered_numbers_say_when_stored():
    rows = [result(88.0, 1, started=NOV29, id=1), result(91.5, 1, started=DEC01, id=2),
            result(90.0, 1, started=None, created=NOV30, id=3)]
    c = choose(rows, 1)
    assert c.tok_s == 91.5 and c.label.endswith("2026-12-01")
    only_stored = choose([result(90.0, 1, started=None, created=NOV30)], 1)
    assert only_stored.label == "baseline 90.0 tok/s measured at concurrency 1, stored 2026-11-30"


@pytest.mark.parametrize("target, server, same", [
    ("Llama-3.1-70B-Instruct", "other", True),            # the model folder's name
    ("/data/ckpt/llama-3.1-70b-instruct/", "other", True),  # another path to a folder of that name
    ("llama-3.1-70b", "other", True),                      # the served model name
    ("Llama-3.1-8B-Instruct", "srv", False),               # same server name, another model
    (None, "srv", True),                                   # target not recorded, measured on this server
    (None, "other", False),
])
def test_same_target(target, server, same):
    c = choose([result(90.0, 1, target=target, server=server)], 1)
    assert (c.result is not None) == same


def test_lengths_where_known():
    rows = [result(90.0, 1, input_len=1024, output_len=512, id=1),
            result(120.0, 1, input_len=128, output_len=128, started=DEC01, id=2),
            result(95.0, 1, started=NOV30, id=3)]  # lengths not recorded
    assert choose(rows, 1, input_len=1024, output_len=512).tok_s == 95.0  # newest that fits
    assert choose(rows, 1, input_len=1024, output_len=512).measured == (1,)
    picked = choose(rows[:1], 1, input_len=1024, output_len=512)
    assert picked.label == ("baseline 90.0 tok/s measured at concurrency 1, 2026-11-29, "
                            "1,024/512 tokens in/out")
    assert choose(rows[:2], 1, input_len=256, output_len=256).result is None
    # lengths not asked: the newest, and the other lengths measured there are named
    c = choose(rows[:2], 1)
    assert c.tok_s == 120.0 and c.other_lengths == ("1,024/512 tokens in/out",)
    assert measured_figures(110.0, 1, c).comparison == (
        "aggregate 110.0 tok/s at 1 running request vs baseline 120.0 tok/s measured at concurrency 1, 2026-12-01, "
        "128/128 tokens in/out (0.92×); at concurrency 1 also measured with 1,024/512 tokens in/out")


def test_none_stored_says_so():
    c = choose([result(82.3, 1, algorithm="EAGLE3")], 1)
    assert c.result is None and not c.stored
    assert c.label == "no baseline (a run without speculation) of this target is stored"
    unplaced = choose([result(90.0, None)], 1)
    assert not unplaced.stored and unplaced.label.endswith("1 stored without a recorded concurrency was left out")
    unknown_alg = choose([result(90.0, 1, algorithm=None)], 1)  # a file that did not say: not a baseline
    assert not unknown_alg.stored


def test_nothing_running_chooses_nothing_but_lists_what_is_stored():
    c = choose(STORED, 0)
    assert c.result is None and c.stored and c.measured == (1, 16)


# (aggregate tok/s, running, ratio text, level, delta)
@pytest.mark.parametrize("agg, running, ratio, level, delta", [
    (82.3, 1, "0.91", "warn", "0.91× baseline"),     # the story: slower than no speculation at concurrency 1
    (50.5, 1, "0.56", "bad", "0.56× baseline"),
    (744.0, 16, "1.20", "good", "1.20× baseline"),
    (700.0, 12, "1.13", "none", "1.13× base @16"),   # another load: no colour
])
def test_aggregate_against_the_baseline_at_the_same_concurrency(agg, running, ratio, level, delta):
    m = measured_figures(agg, running, choose(STORED, running))
    assert f"{m.ratio:.2f}" == ratio and m.level == level and m.delta == delta


def test_comparison_sentences():
    m = measured_figures(82.3, 1, choose(STORED, 1))
    assert m.comparison == ("aggregate 82.3 tok/s at 1 running request vs baseline 90.0 tok/s measured at "
                            "concurrency 1, 2026-11-29 (0.91×)")
    m = measured_figures(700.0, 12, choose(STORED, 12))
    assert m.comparison.startswith("aggregate 700.0 tok/s at 12 running requests vs baseline 620.0 tok/s "
                                   "measured at concurrency 16, 2026-11-29 (nearest measured: 16, the server "
                                   "runs 12): 1.13×, but not at the same load")
    assert m.comparison.endswith("measure the baseline at concurrency 12 to compare")
    idle = measured_figures(0.0, 0, choose(STORED, 0))
    assert idle.ratio is None and idle.level == "none" and "measured at concurrency 1, 16" in idle.comparison
