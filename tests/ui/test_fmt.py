
from ui import fmt


def test_missing_values_are_na_never_zero():
    for f in (fmt.tok_s, fmt.accept_len, fmt.pct, fmt.gib, fmt.count, fmt.duration):
        assert f(None) == "N/A"
        assert f(float("nan")) == "N/A"
    assert fmt.tok_s(0.0) == "0.0 tok/s"


def test_number_conventions():
    assert fmt.tok_s(82.345) == "82.3 tok/s"
    assert fmt.accept_len(2.1) == "2.10"
    assert fmt.pct(97.6) == "98%"
    assert fmt.pct(7.25) == "7.2%"
    assert fmt.gib(61 * 1024**3) == "61.0 GiB"
    assert fmt.count(83288) == "83,288"
    assert fmt.duration(2 * 3600 + 5 * 60 + 9) == "2 h 05 m"
    assert fmt.duration(187) == "3 m 07 s"
    assert fmt.duration(42) == "42 s"
    assert fmt.duration(2 * 86400 + 3 * 3600) == "2 d 03 h"
    assert fmt.eta_range(31 * 3600, 47 * 3600) == "31-47 h"


def test_state_colours_follow_one_mapping():
    assert fmt.state_badge("RUNNING").colour == "green"
    for s in ("STARTING", "BACKOFF", "STOPPING"):
        assert fmt.state_badge(s).colour == "orange"
    assert fmt.state_badge("EXITED", 0).colour == "gray"
    assert fmt.state_badge("EXITED", 3).colour == "red"
    assert fmt.state_badge("EXITED", 3).label == "EXITED 3"
    assert fmt.state_badge("FATAL").colour == "red"
    assert fmt.state_badge("UNKNOWN").colour == "violet"
