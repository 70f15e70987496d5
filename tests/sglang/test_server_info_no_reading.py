"""/server_info's avg_spec_accept_length: 0 or -1 is "no reading yet", never an accept length of 0."""

from __future__ import annotations

import pytest

from backend.sglang.client import ServerInfo


@pytest.mark.parametrize("value", [0, 0.0, -1, "0", float("nan")])
def test_no_reading_is_no_value(value):
    info = ServerInfo.from_json({"internal_states": [{"avg_spec_accept_length": value}]})
    assert info.avg_spec_accept_length is None
    flat = ServerInfo.from_json({"avg_spec_accept_length": value})
    assert flat.avg_spec_accept_length is None


@pytest.mark.parametrize("value, expected", [(2.1, 2.1), ("3.25", 3.25), (1, 1.0)])
def test_a_reading_is_kept(value, expected):
    info = ServerInfo.from_json({"internal_states": [{"avg_spec_accept_length": value}]})
    assert info.avg_spec_accept_length == pytest.approx(expected)


def test_a_missing_key_is_no_value():
    assert ServerInfo.from_json({"internal_states": [{}]}).avg_spec_accept_length is None
