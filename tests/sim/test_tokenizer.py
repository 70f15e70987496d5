"""The simulated tokenizer the project builds, and stop strings on a request, without a server."""

from __future__ import annotations

import json
import random

from backend.sim.models import make_target_dir
from backend.sim.request import Request
from backend.sim.tokenizer import SimTokenizer, TokenPiece, build_tokenizer_json


def test_the_build_is_deterministic_and_written_into_target_folders(tmp_path):
    assert build_tokenizer_json() == build_tokenizer_json()
    a = make_target_dir(tmp_path / "a")
    b = make_target_dir(tmp_path / "b")
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    cfg = json.loads((a / "tokenizer_config.json").read_text())
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert cfg["bos_token"] == "<|begin_of_text|>" and cfg["eos_token"] == "<|eot_id|>"
    assert "add_generation_prompt" in cfg["chat_template"]
    # config.json names the ids tokenizer.json gives its special tokens
    added = {t["content"]: t["id"] for t in json.loads((a / "tokenizer.json").read_text())["added_tokens"]}
    model_cfg = json.loads((a / "config.json").read_text())
    assert model_cfg["bos_token_id"] == added["<|begin_of_text|>"]
    assert model_cfg["eos_token_id"] == added["<|eot_id|>"]


def test_counts_are_tokens_not_characters(tmp_path):
    tok = SimTokenizer.load(str(make_target_dir(tmp_path / "t")))
    assert tok.source.endswith("tokenizer.json")
    # 40 repetitions of one common word: 40 tokens (+ BOS), where characters / 4 would say 60
    assert tok.count(" Paris" * 40) == 40
    assert len(tok.prompt_ids(" Paris" * 40)) == 41
    assert tok.decode(tok.encode("The capital city of France is")) == "The capital city of France is"


def test_a_folder_without_tokenizer_falls_back_to_the_builtin(tmp_path):
    (tmp_path / "bare").mkdir()
    assert SimTokenizer.load(str(tmp_path / "bare")).source == "built-in simulated tokenizer"
    assert SimTokenizer.load(None).source == "built-in simulated tokenizer"


def _req(stop=(), stop_ids=frozenset()) -> Request:
    return Request(rid="r", prompt="p", prompt_tokens=1, max_new=100, natural_len=100, rng=random.Random(0),
                   p=0.5, tokenizer=SimTokenizer.builtin(), stop=tuple(stop), stop_token_ids=stop_ids)


def test_stop_string_across_tokens_is_held_back_then_cut():
    r = _req(stop=[" the model"])
    r.add_tokens([TokenPiece(1, " fast"), TokenPiece(2, " the")])
    assert r.text == " fast"          # " the" may become the stop string: not shown yet
    assert not r.stopped
    kept = r.add_tokens([TokenPiece(3, " model"), TokenPiece(4, " again")])
    assert [p.text for p in kept] == [" model"]  # nothing after the match is generated
    assert r.stopped and r.matched_stop == " the model"
    assert r.full_text == " fast the model" and r.generated == 3
    r.finish_reason = "stop"
    assert r.text == " fast"


def test_held_back_tail_is_released_when_it_does_not_match():
    r = _req(stop=[" the model"])
    r.add_tokens([TokenPiece(1, " the"), TokenPiece(2, " data")])
    assert r.text == " the data" and not r.stopped


def test_stop_token_id():
    r = _req(stop_ids=frozenset({7}))
    r.add_tokens([TokenPiece(5, " a"), TokenPiece(7, " b"), TokenPiece(8, " c")])
    assert r.matched_stop == 7 and r.output_ids == [5, 7]
    r.finish_reason = "stop"
    assert r.text == " a"


def test_an_unusable_tokenizer_json_is_named_and_the_builtin_used(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenizer.json").write_text("{not json")
    tok = SimTokenizer.load(str(bad))
    assert tok.source == "built-in simulated tokenizer"
    assert tok.load_error.startswith(f"{bad / 'tokenizer.json'}: ")
    assert SimTokenizer.builtin().load_error is None


def test_a_tokenizer_json_over_the_read_limit_is_not_read(tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "tokenizer.json", "wb") as f:
        f.write(b"{")
        f.truncate(1 << 30)  # sparse: no disk used
    tok = SimTokenizer.load(str(big))
    assert tok.source == "built-in simulated tokenizer"
    assert tok.load_error == f"{big / 'tokenizer.json'}: 1 GiB, over the 64 MiB read limit for a tokenizer; not read"
