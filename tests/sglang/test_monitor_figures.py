"""Live figures compared like with like, and the prefix-cache hit percentage, against hand-written values."""

from __future__ import annotations

import pytest

from backend.sglang.client import parse_metrics
from backend.sglang.ingest import LogIngester
from backend.sglang.livefigures import accept_vs_lifetime, prefix_cache_hit_pct, ratio_level, speed_figures
from ui import fmt

# (gen throughput, #running-req, baseline) -> (per-request tok/s, ratio to two decimals, level)
SPEED_TABLE = [
    (136.5, 4, 90.0, 34.125, "0.38", "bad"),  # accept_len 1.00 at 4 requests: was "+46.5 vs base" in green
    (574.6, 16, 90.0, 35.9125, "0.40", "bad"),  # a healthy server at 16 requests: was "+484.6"
    (84.1, 1, 90.0, 84.1, "0.93", "warn"),
    (90.0, 1, 90.0, 90.0, "1.00", "good"),
    (81.0, 1, 90.0, 81.0, "0.90", "warn"),  # 0.90 exactly is amber
    (80.9, 1, 90.0, 80.9, "0.90", "bad"),  # 0.8989 is red
    (396.0, 2, 90.0, 198.0, "2.20", "good"),
]


@pytest.mark.parametrize("tput,running,base,per,ratio,level", SPEED_TABLE)
def test_only_the_per_request_figure_meets_the_single_stream_baseline(tput, running, base, per, ratio, level):
    f = speed_figures(tput, running, base)
    assert f.per_request == pytest.approx(per)
    assert f"{f.ratio:.2f}" == ratio and f.level == level
    assert f.aggregate == tput


def test_the_page_sentences():
    four = speed_figures(136.5, 4, 90.0)
    assert four.comparison == ("per-request decode (4 running requests) 34.1 tok/s (= aggregate 136.5 ÷ 4) "
                               "vs single-stream baseline 90.0 tok/s (0.38×)")
    assert four.aggregate_text == "aggregate 136.5 tok/s at 4 running requests"
    one = speed_figures(84.1, 1, 90.0)
    assert one.comparison == "single-stream decode (1 running request) 84.1 tok/s vs single-stream baseline 90.0 tok/s (0.93×)"
    assert one.aggregate_text == "aggregate 84.1 tok/s at 1 running request"


def test_nothing_to_compare():
    idle = speed_figures(12.0, 0, 90.0)
    assert idle.per_request is None and idle.level == "none" and "no request running" in idle.comparison
    nobase = speed_figures(84.1, 1, None)
    assert nobase.ratio is None and nobase.level == "none" and "baseline_tok_s" in nobase.comparison
    empty = speed_figures(None, None, 90.0)
    assert empty.level == "none" and empty.comparison == "no decode line in this run yet"


def test_ratio_levels():
    assert [ratio_level(r) for r in (None, float("nan"), 1.5, 1.0, 0.95, 0.9, 0.89)] == \
        ["none", "none", "good", "good", "warn", "warn", "bad"]


# (current, lifetime) -> (delta text, level)
ACCEPT_TABLE = [
    (1.00, 1.00, "+0.00 · no gain", "bad"),  # was "+0.00 tokens vs lifetime" in green
    (1.05, 1.00, "+0.05 · no gain", "bad"),
    (2.21, 2.21, "+0.00 tokens vs lifetime", "none"),
    (2.40, 2.20, "+0.20 tokens vs lifetime", "good"),
    (2.10, 2.20, "-0.10 tokens vs lifetime", "warn"),  # 0.95 of the lifetime
    (1.80, 2.20, "-0.40 tokens vs lifetime", "bad"),  # 0.82
    (1.00, None, "≤ 1.05: no gain", "bad"),
    (2.00, None, None, "none"),
    (None, 2.0, None, "none"),
]


@pytest.mark.parametrize("cur,life,text,level", ACCEPT_TABLE)
def test_accept_len_against_lifetime(cur, life, text, level):
    d = accept_vs_lifetime(cur, life)
    assert d.text == text and d.level == level


# Prefill lines as SGLang ~2025-01 printed them (the percentage is in the text) and as 0.5.23 prints them
PREFILL_OLD = ("[2025-01-09 10:00:0{i}] Prefill batch. #new-seq: 1, #new-token: {new}, #cached-token: {cached}, "
               "cache hit rate: {rate}, token usage: 0.00, #running-req: 0, #queue-req: 0")
PREFILL_NEW = ("[2026-08-23 09:09:5{i} TP0] Prefill batch, #new-seq: 1, #new-token: {new}, #cached-token: {cached}, "
               "token usage: 0.01, #running-req: 0, #queue-req: 1, #pending-token: 0, cuda graph: False, "
               "input throughput (token/s): 8072.80")
# (new tokens, cached tokens, rate as printed) -> percentage and the page's text
CACHE_TABLE = [(48, 0, "0.00%", 0.0, "0%"), (30, 18, "37.50%", 37.5, "38%"), (0, 48, "100.00%", 100.0, "100%"),
               (190, 10, "5.00%", 5.0, "5.0%")]


@pytest.mark.parametrize("bulk", [False, True], ids=["per-line", "vectorised"])
@pytest.mark.parametrize("template", [PREFILL_OLD, PREFILL_NEW], ids=["printed-rate", "token-counts"])
def test_prefix_cache_hit_from_real_prefill_lines(tmp_path, bulk, template):
    log = tmp_path / "srv.log"
    ing = LogIngester(log, bulk=bulk)
    ing.bulk_min_bytes = 0  # every piece through the vectorised parser when bulk
    for i, (new, cached, rate, pct, text) in enumerate(CACHE_TABLE):
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(template.format(i=i, new=new, cached=cached, rate=rate) + "\n")
        ing.poll()
        value, source = prefix_cache_hit_pct(ing.last_prefill.to_dict())
        assert value == pytest.approx(pct), (rate, source)
        assert fmt.pct(value) == text
    assert ing.stats.prefill_lines == len(CACHE_TABLE)
    if bulk:
        assert ing.bulk_pieces == len(CACHE_TABLE)


METRICS_TEXT = """# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{model_name="m",tp_rank="0"}} {v}
"""


@pytest.mark.parametrize("v,pct,text", [("0.0", 0.0, "0%"), ("0.375", 37.5, "38%"), ("1.0", 100.0, "100%")])
def test_prefix_cache_hit_from_metrics_is_a_fraction(v, pct, text):
    value, source = prefix_cache_hit_pct(None, parse_metrics(METRICS_TEXT.format(v=v)))
    assert value == pytest.approx(pct) and fmt.pct(value) == text and "/metrics" in source
    assert prefix_cache_hit_pct(None, None) == (None, "no prefill line or cache_hit_rate metric in this run yet")
