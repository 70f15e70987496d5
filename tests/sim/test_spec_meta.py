"""Per-request speculative figures as SGLang 0.5.23 gives them: ``meta_info`` on /generate, and
``sglext.spec_tokens_details`` on the OpenAI API when the request asks with
``return_spec_tokens_details`` (streamed: a chunk of its own, no choices, before the usage chunk);
nothing without speculation or without asking; per-prompt accept lengths
(SPECDECK_SIM_ACCEPT_LEN_BY_TEXT)."""

import json

import pytest

from backend.sim.server import accept_len_by_text
from backend.sim.startup import StartupFailed

# SpecTokensDetails of sglang/srt/entrypoints/openai/protocol.py (0.5.23), every field
SGLANG_SPEC_DETAILS = {"spec_accept_rate", "spec_accept_length", "spec_cap_length", "spec_block_accept_length",
                       "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct",
                       "spec_correct_drafts_histogram", "spec_cap_lens_histogram"}
# what tokenizer_manager._calculate_spec_decoding_metrics puts in meta_info (0.5.23, no DSpark)
SGLANG_META = {"spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts",
               "spec_verify_ct", "spec_correct_drafts_histogram"}


def spec_args(dirs):
    return ["--model-path", str(dirs["target"]), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(dirs["eagle3"]), "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--served-model-name", "m"]


@pytest.fixture(scope="module")
def spec(launch, dirs):
    sim = launch(spec_args(dirs), {"SPECDECK_SIM_ACCEPT_LEN": "2.0",
                                   "SPECDECK_SIM_ACCEPT_LEN_BY_TEXT": json.dumps({"[math]": 3.2})})
    sim.wait_ready()
    return sim


@pytest.fixture(scope="module")
def plain(launch, dirs):
    sim = launch(["--model-path", str(dirs["target"]), "--served-model-name", "m"])
    sim.wait_ready()
    return sim


def chat(sim, text, **extra):
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 120,
            "ignore_eos": True, **extra}
    st, raw = sim.request("/v1/chat/completions", body)
    assert st == 200, raw
    return json.loads(raw)


def sse(raw: bytes) -> list:
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


def test_generate_meta_info_names(spec):
    st, raw = spec.request("/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 80,
                                                                             "ignore_eos": True}})
    meta = json.loads(raw)["meta_info"]
    assert st == 200 and SGLANG_META <= set(meta)
    assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
    assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * 3  # num_draft_tokens - 1


def test_chat_spec_tokens_details_when_asked(spec):
    ans = chat(spec, "hello", return_spec_tokens_details=True)
    det = ans["sglext"]["spec_tokens_details"]
    assert set(det) == SGLANG_SPEC_DETAILS
    assert det["spec_verify_ct"] > 0
    assert det["spec_accept_length"] == pytest.approx(ans["usage"]["completion_tokens"] / det["spec_verify_ct"])
    assert "sglext" not in chat(spec, "hello")  # not asked: SGLang leaves sglext out


def test_completions_and_n2_give_a_list(spec):
    st, raw = spec.request("/v1/completions", {"model": "m", "prompt": "abc", "max_tokens": 40, "n": 2,
                                               "return_spec_tokens_details": True})
    det = json.loads(raw)["sglext"]["spec_tokens_details"]
    assert st == 200 and isinstance(det, list) and len(det) == 2 and all(d["spec_verify_ct"] > 0 for d in det)


def test_streamed_details_chunk_before_usage(spec):
    st, raw = spec.request("/v1/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 60, "stream": True,
        "stream_options": {"include_usage": True}, "return_spec_tokens_details": True})
    chunks = sse(raw)
    ext = [i for i, c in enumerate(chunks) if "sglext" in c]
    assert st == 200 and len(ext) == 1
    i = ext[0]
    assert chunks[i]["choices"] == [] and chunks[i + 1]["usage"]["completion_tokens"] > 0
    det = chunks[i]["sglext"]["spec_tokens_details"]
    assert det["spec_verify_ct"] > 0 and set(det) == SGLANG_SPEC_DETAILS


def test_no_speculation_no_details(plain):
    ans = chat(plain, "hello", return_spec_tokens_details=True)
    assert "sglext" not in ans
    st, raw = plain.request("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 10}})
    assert not any(k.startswith("spec_") for k in json.loads(raw)["meta_info"])


@pytest.mark.slow
def test_accept_len_by_prompt_text(spec):
    def mean(text):
        toks = vct = 0
        for i in range(8):
            det = chat(spec, f"{text} {i}", return_spec_tokens_details=True)["sglext"]["spec_tokens_details"]
            toks += round(det["spec_accept_length"] * det["spec_verify_ct"])
            vct += det["spec_verify_ct"]
        return toks / vct
    assert mean("[math] add these") == pytest.approx(3.2, abs=0.35)
    assert mean("plain words") == pytest.approx(2.0, abs=0.3)


def test_accept_len_by_text_errors():
    assert accept_len_by_text("") == []
    assert accept_len_by_text('{"a": 2}') == [("a", 2.0)]
    for bad in ("[1]", "{", '{"a": 0.5}', '{"": 2}', '{"a": "x"}'):
        with pytest.raises(StartupFailed, match="SPECDECK_SIM_ACCEPT_LEN_BY_TEXT"):
            accept_len_by_text(bad)
