"""Per-dataset accept_len from the server's own per-request figures: ``regen run`` against the
simulator speculating at a different mean accept length for each of two datasets (its
SPECDECK_SIM_ACCEPT_LEN_BY_TEXT) records each row's verify steps and tokens in the row's regen
and the per-dataset accept_len in the progress log; a resumed run counts the rows of the first
from the output; a server without speculation gives no figure (no accept_len)."""

from __future__ import annotations

import json

import pytest

from backend.regen.client import parse_completion, spec_figures
from tests.regen.jobkit import SimServer, progress_lines, read_jsonl, run_cli
from tests.simws import make_models

pytestmark = pytest.mark.timeout(240)

MATH_LEN, CHAT_LEN = 3.2, 1.8


def _rows(path, n, start, text):
    with open(path, "a") as f:
        for i in range(start, start + n):
            f.write(json.dumps({"id": f"{path.stem}{i}", "conversations": [
                {"role": "user", "content": f"{text} {i}"}, {"role": "assistant", "content": "old"}]}) + "\n")


@pytest.fixture
def spec_sim(tmp_path):
    target, draft = make_models(tmp_path / "m")
    sim = SimServer(tmp_path, env={"SPECDECK_SIM_ACCEPT_LEN": str(CHAT_LEN),
                                   "SPECDECK_SIM_ACCEPT_LEN_BY_TEXT": json.dumps({"[math]": MATH_LEN})},
                    extra=["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                           "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "4",
                           "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5"])
    try:
        yield sim.start()
    finally:
        sim.stop()


@pytest.fixture
def plain_sim(tmp_path):
    target, _ = make_models(tmp_path / "p")
    sim = SimServer(tmp_path, extra=["--model-path", str(target)])
    try:
        yield sim.start()
    finally:
        sim.stop()


def _run(inputs, sim, out):
    args = ["run"]
    for p in inputs:
        args += ["--input", str(p)]
    r = run_cli(*args, "--server", sim.url, "--out", str(out), "--max-tokens", "96", "--concurrency", "8",
                "--temperature", "0")
    assert r.returncode == 0, r.stdout + r.stderr


def test_accept_len_per_dataset_matches_the_server_and_survives_resume(tmp_path, spec_sim):
    math, chat = tmp_path / "math.jsonl", tmp_path / "chat.jsonl"
    _rows(math, 15, 0, "[math] add these numbers")
    _rows(chat, 15, 0, "tell me about your day")
    out = tmp_path / "out" / "mixed.jsonl"
    _run([math, chat], spec_sim, out)
    first = progress_lines(out)[-1]["datasets"]
    assert first["math"]["spec_rows"] == first["math"]["done"] == 15
    # a second run on more rows: the first run's figures come back from the output, the new rows add theirs
    _rows(math, 10, 15, "[math] add these numbers")
    _rows(chat, 10, 15, "tell me about your day")
    _run([math, chat], spec_sim, out)
    rows = read_jsonl(out)
    assert len(rows) == len({r["id"] for r in rows}) == 50  # exactly once
    for r in rows:
        assert r["regen"]["spec_verify_ct"] > 0 and r["regen"]["spec_tokens"] >= r["regen"]["spec_verify_ct"]
    ds = progress_lines(out)[-1]["datasets"]
    for name, want in (("math", MATH_LEN), ("chat", CHAT_LEN)):
        d = ds[name]
        mine = [r["regen"] for r in rows if r["regen"]["dataset"] == name]
        assert d["done"] == d["spec_rows"] == 25
        assert d["spec_tokens"] == sum(r["spec_tokens"] for r in mine)
        assert d["spec_verify_ct"] == sum(r["spec_verify_ct"] for r in mine)
        assert d["accept_len"] == pytest.approx(d["spec_tokens"] / d["spec_verify_ct"], abs=1e-3)
        # the last step of an answer cut at max_tokens may accept less: a little under the configured mean
        assert d["accept_len"] == pytest.approx(want, abs=0.35), (name, d)
    assert ds["math"]["accept_len"] > ds["chat"]["accept_len"] + 0.8


def test_no_speculation_no_figure(tmp_path, plain_sim):
    inp = tmp_path / "chat.jsonl"
    _rows(inp, 6, 0, "hello")
    out = tmp_path / "out" / "plain.jsonl"
    _run([inp], plain_sim, out)
    d = progress_lines(out)[-1]["datasets"]["chat"]
    assert d == {"total": 6, "done": 6, "failed": 0, "skipped": 0}  # no figure: no accept_len
    assert progress_lines(out)[-1]["spec_recorded"] is True
    assert all("spec_verify_ct" not in r["regen"] for r in read_jsonl(out))


def test_figures_read_from_sglext_or_meta_info_and_bad_ones_ignored():
    body = {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}], "usage": {"completion_tokens": 9},
            "sglext": {"spec_tokens_details": {"spec_verify_ct": 4, "spec_accept_length": 2.25}}}
    out = parse_completion(json.dumps(body).encode())
    assert (out.spec_tokens, out.spec_verify_ct) == (9, 4)
    assert spec_figures({}, {"meta_info": {"spec_verify_ct": 2, "spec_accept_length": 3.0}}) == (6, 2)
    assert spec_figures({"sglext": {"spec_tokens_details": [{"spec_verify_ct": 3, "spec_accept_length": 2.0}]}}) \
        == (6, 3)
    for bad in ({"spec_verify_ct": 0, "spec_accept_length": 2.0}, {"spec_verify_ct": "3", "spec_accept_length": 2},
                {"spec_verify_ct": 3, "spec_accept_length": 0.5}, {"spec_verify_ct": True, "spec_accept_length": 2}):
        assert spec_figures({"sglext": {"spec_tokens_details": bad}}) is None
    del body["sglext"]
    out = parse_completion(json.dumps(body).encode())
    assert out.spec_tokens is None and out.spec_verify_ct is None
