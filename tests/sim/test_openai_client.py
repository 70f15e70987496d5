"""The simulator through the official ``openai`` Python client, as an application would call a
real SGLang server: n choices, stop strings, log-probabilities, SGLang's error answers and
models.retrieve. Expected values come from the request (max_tokens, n, stop) and from the
texts SGLang 0.5.23 answers with."""

from __future__ import annotations

import json

import pytest

from tests.sim.simproc import Sim, spec_args


class _OpenAI:
    """The ``openai`` package, imported at its first use in a test (it takes about a second of CPU to
    import, which every worker would otherwise pay when the suite is collected)."""

    def __getattr__(self, name: str):
        if name.startswith("_"):  # what collection asks of every module global
            raise AttributeError(name)
        import openai

        return getattr(openai, name)


openai = _OpenAI()

MODEL = "llama-8b"
STOPS = [" model", " the"]


@pytest.fixture(scope="module")
def sim(launch, dirs) -> Sim:
    s = launch(spec_args(dirs, "EAGLE3") + ["--served-model-name", MODEL, "--decode-log-interval", "5"])
    s.wait_ready()
    return s


@pytest.fixture(scope="module")
def client(sim) -> openai.OpenAI:
    with openai.OpenAI(base_url=sim.base + "/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def msgs(text: str = "Tell me about speculative decoding.") -> list[dict]:
    return [{"role": "user", "content": text}]


# -- n ---------------------------------------------------------------------------------
def test_chat_n2_returns_two_choices_and_sums_completion_tokens(client):
    r = client.chat.completions.create(model=MODEL, messages=msgs(), n=2, max_tokens=12,
                                       extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.finish_reason == "length" and c.message.content for c in r.choices)
    assert r.usage.completion_tokens == 24  # 2 choices x 12 tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + 24


def test_completions_n2(client):
    r = client.completions.create(model=MODEL, prompt="The draft model", n=2, max_tokens=7,
                                  extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.completion_tokens == 14


# -- stop ------------------------------------------------------------------------------
def test_chat_stop_strings_end_the_text_before_the_match(client):
    for _ in range(3):  # each request draws its own words; every one must stop correctly
        r = client.chat.completions.create(model=MODEL, messages=msgs(), stop=STOPS, max_tokens=300,
                                           extra_body={"ignore_eos": True})
        c = r.choices[0]
        assert c.finish_reason == "stop"
        assert c.model_extra["matched_stop"] in STOPS
        assert not any(s in c.message.content for s in STOPS), c.message.content
        assert r.usage.completion_tokens < 300


def test_completions_stop_and_streamed_text_never_shows_the_stop_string(client):
    r = client.completions.create(model=MODEL, prompt="hello", stop=" the", max_tokens=300,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop" and r.choices[0].model_extra["matched_stop"] == " the"
    assert " the" not in r.choices[0].text
    stream = client.chat.completions.create(model=MODEL, messages=msgs(), stop=STOPS, max_tokens=300,
                                            stream=True, extra_body={"ignore_eos": True})
    text, finish = "", None
    for ch in stream:
        for c in ch.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert finish == "stop"
    assert not any(s in text for s in STOPS), text


# -- logprobs --------------------------------------------------------------------------
def _check_top(entries, k):
    assert len(entries) == k
    lps = [e.logprob for e in entries]
    assert lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)


def test_chat_logprobs_and_top_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=msgs(), max_tokens=10, logprobs=True,
                                       top_logprobs=3, extra_body={"ignore_eos": True})
    c = r.choices[0]
    content = c.logprobs.content
    assert len(content) == 10
    assert "".join(t.token for t in content) == c.message.content
    for t in content:
        assert t.logprob <= 0 and t.bytes == list(t.token.encode("utf-8"))
        _check_top(t.top_logprobs, 3)
    plain = client.chat.completions.create(model=MODEL, messages=msgs(), max_tokens=3)
    assert plain.choices[0].logprobs is None


def test_completions_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="The cache", max_tokens=10, logprobs=2,
                                  extra_body={"ignore_eos": True})
    c = r.choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 10
    assert "".join(lp.tokens) == c.text
    offsets = [0]
    for t in lp.tokens[:-1]:
        offsets.append(offsets[-1] + len(t))
    assert lp.text_offset == offsets
    assert all(len(d) <= 2 and all(v <= 0 for v in d.values()) for d in lp.top_logprobs)


def test_streaming_chat_n2_with_logprobs(client):
    stream = client.chat.completions.create(model=MODEL, messages=msgs(), n=2, max_tokens=8, logprobs=True,
                                            top_logprobs=1, stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    text = {0: "", 1: ""}
    tokens = {0: [], 1: []}
    finish = {}
    usage = None
    for ch in stream:
        usage = ch.usage or usage
        for c in ch.choices:
            text[c.index] += c.delta.content or ""
            if c.logprobs and c.logprobs.content:
                tokens[c.index] += [t.token for t in c.logprobs.content]
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert finish == {0: "length", 1: "length"}
    for i in (0, 1):
        assert len(tokens[i]) == 8 and "".join(tokens[i]) == text[i]
    assert usage.completion_tokens == 16


# -- errors ----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"max_tokens": -1}, "max_new_tokens must be at least 0, got -1."),
    ({"temperature": -1}, "temperature must be a non-negative finite number, got -1.0."),
    ({"top_p": 0}, "top_p must be in (0, 1], got 0.0."),
])
def test_chat_bad_sampling_parameters_get_sglangs_400(client, kwargs, message):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL, messages=msgs(), **kwargs)
    e = ei.value
    assert e.status_code == 400
    assert e.body == {"object": "error", "message": message, "type": "BadRequestError", "param": None,
                      "code": 400}
    assert e.type == "BadRequestError" and message in str(e)


def test_empty_messages_and_bad_completions_max_tokens(client, sim):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL, messages=[])
    assert ei.value.body["message"] == "Messages cannot be empty."
    assert ei.value.body["type"] == "BadRequestError"
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=MODEL, prompt="x", max_tokens=-1)
    assert "max_tokens must be positive" in ei.value.body["message"]
    assert ei.value.body["type"] == "Bad Request"
    st, raw = sim.request("/v1/chat/completions", {"model": MODEL})  # no messages at all
    body = json.loads(raw)
    assert st == 400 and body["object"] == "error" and body["type"] == "Bad Request"
    assert "messages" in body["message"] and "Field required" in body["message"]


# -- models ----------------------------------------------------------------------------
def test_models_retrieve(client):
    m = client.models.retrieve(MODEL)
    assert m.id == MODEL and m.object == "model" and m.owned_by == "sglang"
    assert [x.id for x in client.models.list()] == [MODEL]
    with pytest.raises(openai.NotFoundError) as ei:
        client.models.retrieve("no-such-model")
    assert ei.value.body == {"message": "The model 'no-such-model' does not exist",
                             "type": "invalid_request_error", "param": "model", "code": "model_not_found"}


# -- native /generate ------------------------------------------------------------------
def test_generate_has_output_ids_retractions_and_one_final_stream_chunk(sim):
    st, raw = sim.request("/generate", {"text": "The capital city of France is",
                                        "sampling_params": {"max_new_tokens": 9, "ignore_eos": True}})
    assert st == 200
    out = json.loads(raw)
    assert len(out["output_ids"]) == 9 == out["meta_info"]["completion_tokens"]
    assert out["meta_info"]["num_retractions"] == 0
    assert out["meta_info"]["prompt_tokens"] == 7  # BOS + 6 words, as Llama 3's tokenizer counts it
    st, raw = sim.request("/generate", {"text": "stream it", "stream": True,
                                        "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}})
    events = [l[len("data: "):] for l in raw.decode().split("\n\n") if l.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    finals = [c for c in chunks if c["meta_info"]["finish_reason"] is not None]
    assert len(finals) == 1 and finals[0] is chunks[-1]
    assert finals[0]["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
    assert len(finals[0]["output_ids"]) == 12
    assert [len(c["output_ids"]) for c in chunks] == sorted(len(c["output_ids"]) for c in chunks)


def test_generate_bad_sampling_gets_400(sim):
    st, raw = sim.request("/generate", {"text": "x", "sampling_params": {"max_new_tokens": -1}})
    assert st == 400
    assert json.loads(raw) == {"error": {"message": "max_new_tokens must be at least 0, got -1."}}


def test_generate_stop_string_matched(sim):
    st, raw = sim.request("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 300, "stop": [" the"],
                                                                       "ignore_eos": True}})
    out = json.loads(raw)
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": " the"}
    assert " the" not in out["text"]


def test_natural_end_matches_the_eos_token_of_the_folder(client, dirs):
    added = {t["content"]: t["id"] for t in
             json.loads((dirs["target"] / "tokenizer.json").read_text())["added_tokens"]}
    eos = json.loads((dirs["target"] / "tokenizer_config.json").read_text())["eos_token"]
    r = client.chat.completions.create(model=MODEL, messages=msgs(), max_tokens=2000)
    c = r.choices[0]
    assert c.finish_reason == "stop" and c.model_extra["matched_stop"] == added[eos]


def test_completions_bad_temperature(client):
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=MODEL, prompt="x", temperature=-1)
    assert ei.value.body["message"] == "temperature must be a non-negative finite number, got -1.0."
    assert ei.value.body["type"] == "BadRequestError"


def test_prompt_plus_max_tokens_beyond_the_context_is_refused(client):
    p = client.chat.completions.create(model=MODEL, messages=msgs(), max_tokens=1).usage.prompt_tokens
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL, messages=msgs(), max_tokens=131072)
    assert ei.value.body["message"] == (
        "Requested token count exceeds the model's maximum context length of 131072 tokens. You requested "
        f"a total of {131072 + p} tokens: {p} tokens from the input messages and 131072 tokens for the "
        "completion. Please reduce the number of tokens in the input messages or the completion to fit "
        "within the limit.")


def test_generate_return_logprob(sim):
    st, raw = sim.request("/generate", {"text": "The cache", "return_logprob": True, "top_logprobs_num": 2,
                                        "return_text_in_logprobs": True,
                                        "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}})
    assert st == 200
    out = json.loads(raw)
    m = out["meta_info"]
    assert m["input_token_logprobs"] == []  # SGLang's default: output tokens only
    assert m["output_token_logprobs_length"] == 6
    assert [t[1] for t in m["output_token_logprobs"]] == out["output_ids"]
    assert "".join(t[2] for t in m["output_token_logprobs"]) == out["text"]
    assert all(t[0] <= 0 for t in m["output_token_logprobs"])
    assert all(len(top) == 2 and top[0][0] >= top[1][0] for top in m["output_top_logprobs"])
    ids = [5, 60, 61, 62]  # a prompt given as token ids, input log-probs from its first token
    st, raw = sim.request("/generate", {"input_ids": ids, "return_logprob": True, "logprob_start_len": 0,
                                        "sampling_params": {"max_new_tokens": 2}})
    m = json.loads(raw)["meta_info"]
    assert [t[1] for t in m["input_token_logprobs"]] == ids
    assert m["input_token_logprobs"][0][0] is None and all(t[0] <= 0 for t in m["input_token_logprobs"][1:])
    assert all(t[2] is None for t in m["output_token_logprobs"])  # no texts unless asked
    st, raw = sim.request("/generate", {"input_ids": ids, "return_logprob": True, "logprob_start_len": 9,
                                        "sampling_params": {"max_new_tokens": 2}})
    assert st == 400 and "logprob_start_len" in json.loads(raw)["error"]["message"]
