"""The simulator as a real process over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import re
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.sim.simproc import Sim, spec_args

TS = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def decode_lines(sim: Sim) -> list[str]:
    return [l for l in sim.lines() if "Decode batch" in l]


def accept_lens(sim: Sim) -> list[float]:
    return [float(m.group(1)) for l in decode_lines(sim) if (m := re.search(r"accept len: ([\d.]+)", l))]


# --------------------------------------------------------------------------------------
def test_health_503_then_200_startup_order_and_sigterm(launch, dirs):
    sim = launch(spec_args(dirs, "EAGLE3") + ["--enable-metrics"], speed="8")
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and 200 not in seen:
        assert sim.proc.poll() is None, sim.text()
        st = sim.status("/health")
        if st is not None and (not seen or seen[-1] != st):
            seen.append(st)
        time.sleep(0.02)
    assert seen[:1] == [503] and seen[-1] == 200, seen
    order = [r"server_args=ServerArgs\(model_path=", r"Init torch distributed begin\.",
             r"Init torch distributed ends\. mem usage=", r"Load weight begin\. avail mem=",
             r"Loading safetensors checkpoint shards: 100% Completed \| 3/3",
             r"Load weight end\. elapsed=[\d.]+ s, type=LlamaForCausalLM, ",
             r"KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, K size: ",
             r"Capture target verify CUDA graph begin\.", r"Capture target verify CUDA graph end\.",
             r"type=LlamaForCausalLMEagle3", r"Capture draft cuda graph end\.",
             r"max_total_num_tokens=\d+, .*max_running_requests=48, ",
             r"INFO:     Started server process \[\d+\]", r"INFO:     Uvicorn running on http://127\.0\.0\.1:",
             r'"GET /model_info HTTP/1\.1" 200 OK', r"Prefill batch, #new-seq: 1, #new-token: 7, ",
             r'INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK',
             r"The server is fired up and ready to roll!"]
    lines = sim.lines()
    pos = 0
    for pat in order:
        idx = next((i for i in range(pos, len(lines)) if re.search(pat, lines[i])), None)
        assert idx is not None, f"{pat!r} missing after line {pos}:\n" + "\n".join(lines)
        pos = idx + 1
    fired = next(l for l in lines if "fired up" in l)
    assert re.match(TS + r"\] The server is fired up and ready to roll!$", fired)
    assert sim.stop() == 0
    assert "INFO:     Finished server process" in sim.text()


@pytest.fixture(scope="module")
def eagle3(launch, dirs):
    sim = launch(spec_args(dirs, "EAGLE3") + ["--enable-metrics", "--decode-log-interval", "5",
                                              "--served-model-name", "llama-8b"])
    sim.wait_ready()
    return sim


def test_chat_completion_non_streaming_counts_usage(eagle3):
    st, raw = eagle3.request("/v1/chat/completions", {
        "model": "llama-8b", "messages": [{"role": "user", "content": "Say something about drafts."}],
        "max_tokens": 30})
    assert st == 200
    body = json.loads(raw)
    assert body["object"] == "chat.completion" and body["model"] == "llama-8b"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"].strip()
    assert choice["finish_reason"] == "length"
    u = body["usage"]
    assert u["completion_tokens"] == 30 and u["prompt_tokens"] > 0
    assert u["total_tokens"] == u["prompt_tokens"] + 30


def test_chat_completion_streaming(eagle3):
    req = {"model": "llama-8b", "messages": [{"role": "user", "content": "stream please"}],
           "max_tokens": 25, "stream": True, "stream_options": {"include_usage": True}}
    st, raw = eagle3.request("/v1/chat/completions", req)
    assert st == 200
    events = [l[len("data: "):] for l in raw.decode().split("\n\n") if l.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content.strip()
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in finals] == ["length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 25
    # speculation streams several tokens per chunk
    content_chunks = [c for c in chunks[1:] if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content_chunks) < 25


def test_generate_meta_info_and_eagle3_accept_len(eagle3):
    st, raw = eagle3.request("/generate", {"text": "The draft model", "sampling_params": {"max_new_tokens": 200}})
    assert st == 200
    meta = json.loads(raw)["meta_info"]
    assert meta["completion_tokens"] == 200 and meta["finish_reason"] == {"type": "length", "length": 200}
    assert meta["spec_verify_ct"] > 0
    assert meta["spec_accept_length"] > 1.5
    assert {"spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_accept_rate"} <= set(meta)
    lens = accept_lens(eagle3)
    assert len(lens) >= 10
    assert sum(lens) / len(lens) > 1.5
    assert all(re.search(r", accept len: [\d.]+, accept rate: [\d.]+, cuda graph: True, ", l)
               for l in decode_lines(eagle3))
    st, raw = eagle3.request("/server_info")
    info = json.loads(raw)
    assert st == 200 and info["speculative_algorithm"] == "EAGLE3" and info["version"] == "0.5.23"
    state = info["internal_states"][0]
    assert state["avg_spec_accept_length"] > 1.5 and state["last_gen_throughput"] > 0
    st, raw = eagle3.request("/get_server_info")
    assert st == 200 and "internal_states" in json.loads(raw)
    eagle3.wait_for(r"Endpoint '/get_server_info' is deprecated")


def test_metrics_parse_with_prometheus_parser(eagle3):
    eagle3.request("/generate", {"text": "metrics", "sampling_params": {"max_new_tokens": 20}})
    st, raw = eagle3.request("/metrics")
    assert st == 200
    fams = {f.name: f for f in text_string_to_metric_families(raw.decode())}
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput",
                 "sglang:token_usage", "sglang:spec_accept_length", "sglang:spec_accept_rate",
                 "sglang:prompt_tokens", "sglang:generation_tokens", "sglang:time_to_first_token_seconds"):
        assert name in fams, sorted(fams)
    acc = fams["sglang:spec_accept_length"].samples[0]
    assert acc.labels["model_name"] == "llama-8b" and acc.labels["tp_rank"] == "0"
    assert acc.value > 1.0
    gen = [s for s in fams["sglang:generation_tokens"].samples if s.name.endswith("_total")]
    assert gen and gen[0].value >= 20
    ttft = fams["sglang:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    count = [s for s in ttft.samples if s.name.endswith("_count")][0]
    assert count.value >= 1


def test_models_model_info_and_flush_cache(eagle3):
    st, raw = eagle3.request("/v1/models")
    assert st == 200 and json.loads(raw)["data"][0]["id"] == "llama-8b"
    st, raw = eagle3.request("/model_info")
    assert st == 200 and json.loads(raw)["architectures"] == ["LlamaForCausalLM"]
    st, raw = eagle3.request("/flush_cache", {})
    assert st == 200 and raw.startswith(b"Cache flushed.")
    assert eagle3.status("/health_generate") == 200
    assert eagle3.status("/no_such_route") == 404


# --------------------------------------------------------------------------------------
def _run_one(sim: Sim, tokens: int = 40) -> None:
    sim.wait_ready()
    st, _ = sim.request("/generate", {"text": "hello", "sampling_params": {"max_new_tokens": tokens}})
    assert st == 200


def test_eagle3_draft_with_eagle_flag_accepts_nothing_0_5_4(launch, dirs):
    sim = launch(spec_args(dirs, "EAGLE") + ["--decode-log-interval", "5"], {"SPECDECK_SIM_VERSION": "0.5.4"})
    _run_one(sim, 60)
    lines = decode_lines(sim)
    assert len(lines) >= 5
    pat = (TS + r"\] Decode batch \[\d+\], #running-req: 1, #token: \d+, token usage: [\d.]+, "
           r"accept len: 1\.00, accept rate: 0\.25, cuda graph: True, gen throughput \(token/s\): [\d.]+, "
           r"#queue-req: 0, $")
    for line in lines:
        assert re.match(pat, line), line
    pre = [l for l in sim.lines() if "Prefill batch" in l]
    assert pre and all(re.match(TS + r"\] Prefill batch \[\d+\], #new-seq: .*#queue-req: \d+, $", l) for l in pre)
    st, raw = sim.request("/get_server_info")
    assert json.loads(raw)["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(1.0)
    assert sim.status("/server_info") == 404  # only from 0.5.10


def test_0_4_6_format_with_tp2(launch, dirs):
    sim = launch(spec_args(dirs, "EAGLE3") + ["--tp-size", "2", "--decode-log-interval", "5"],
                 {"SPECDECK_SIM_VERSION": "0.4.6"})
    _run_one(sim)
    lines = decode_lines(sim)
    assert lines
    pat = (TS + r" TP0\] Decode batch\. #running-req: \d+, #token: \d+, token usage: [\d.]+, "
           r"accept len: [\d.]+, cuda graph: True, gen throughput \(token/s\): [\d.]+, #queue-req: \d+$")
    assert all(re.match(pat, l) for l in lines), lines
    assert not any("accept rate" in l for l in lines)
    pre = [l for l in sim.lines() if "Prefill batch" in l]
    assert pre and all(re.match(TS + r" TP0\] Prefill batch\. #new-seq: \d+, .*#queue-req: \d+$", l) for l in pre)
    text = sim.text()
    assert re.search(TS + r" TP1\] Load weight begin\.", text)
    assert not re.search(TS + r" TP1\] (Decode|Prefill) batch", text)
    assert re.search(TS + r"\] INFO:     Started server process", text)  # main process: no rank tag
    assert "Capture cuda graph begin. This can take up to several minutes." in text


def test_0_5_23_format_no_speculation_with_ms(launch, dirs):
    sim = launch(["--model-path", str(dirs["target"]), "--decode-log-interval", "5"],
                 {"SPECDECK_SIM_VERSION": "0.5.23", "SGLANG_LOG_MS": "1"})
    _run_one(sim)
    lines = decode_lines(sim)
    assert lines
    pat = (TS + r"\.\d{3}\] Decode batch, #running-req: \d+, #token: \d+, token usage: [\d.]+, "
           r"cuda graph: True, gen throughput \(token/s\): [\d.]+, #queue-req: \d+$")
    assert all(re.match(pat, l) for l in lines), lines
    assert not any("accept" in l for l in lines)
    pre = [l for l in sim.lines() if "Prefill batch" in l]
    assert pre and all(re.search(r", #pending-token: \d+, cuda graph: False, input throughput \(token/s\): [\d.]+$", l)
                       for l in pre)
    assert "Capture target decode CUDA graph begin." in sim.text()
    st, raw = sim.request("/server_info")
    assert "avg_spec_accept_length" not in json.loads(raw)["internal_states"][0]


def test_api_key_and_unknown_flag(launch, dirs):
    sim = launch(["--model-path", str(dirs["target"]), "--api-key", "s3cret", "--enable-metrics",
                  "--made-up-flag", "7"])
    sim.wait_ready()
    st, raw = sim.request("/v1/models")
    assert st == 401 and json.loads(raw) == {"error": "Unauthorized"}
    assert sim.request("/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
    assert sim.request("/v1/models", headers={"Authorization": "Bearer s3cret"})[0] == 200
    assert sim.status("/health") == 200 and sim.status("/metrics") == 200
    st, _ = sim.request("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3})
    assert st == 401
    assert re.search(r"ignores unrecognized arguments: --made-up-flag 7", sim.text())


@pytest.mark.parametrize("fail,expect", [
    ("oom", r"RuntimeError: Not enough memory\. Please try to increase --mem-fraction-static\. "
            r"Current value: self\.server_args\.mem_fraction_static=0\.88"),
    ("cuda-graph", r"Exception: Capture cuda graph failed: .*\nPossible solutions:\n"
                   r"1\. set --mem-fraction-static to a smaller value.*\n2\. set --cuda-graph-max-bs-decode to"),
])
def test_fatal_startup_errors(launch, dirs, fail, expect):
    sim = launch(["--model-path", str(dirs["target"])], {"SPECDECK_SIM_FAIL": fail})
    rc = sim.proc.wait(30)
    text = sim.text()
    assert rc != 0
    assert re.search(expect, text), text
    assert "Scheduler hit an exception: Traceback (most recent call last):" in text
    assert "Received sigquit from a child process. It usually means the child failed." in text
    assert "fired up" not in text


def test_wrong_fc_width_fails_loading_draft(launch, dirs):
    sim = launch(spec_args(dirs, "EAGLE3", draft="narrow"))
    assert sim.proc.wait(30) != 0
    assert re.search(r"AssertionError: Attempted to load weight \(torch\.Size\(\[4096, 7168\]\)\) into parameter "
                     r"\(torch\.Size\(\[4096, 12288\]\)\)", sim.text())


def test_cuda_graph_max_bs_is_ambiguous_on_0_5_23(launch, dirs):
    sim = launch(["--model-path", str(dirs["target"]), "--cuda-graph-max-bs", "8"], {"SPECDECK_SIM_VERSION": "0.5.23"})
    assert sim.proc.wait(30) == 2
    assert "error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode" in sim.text()


def test_background_traffic_without_client(launch, dirs):
    sim = launch(["--model-path", str(dirs["target"]), "--decode-log-interval", "10"],
                 {"SPECDECK_SIM_TRAFFIC": "4"})
    sim.wait_ready()
    sim.wait_for(r"Decode batch, #running-req: 4, ")
    st, raw = sim.request("/server_info")
    assert st == 200


def test_sigterm_during_startup_exits_cleanly(launch, dirs):
    sim = launch(["--model-path", str(dirs["target"])], speed="1")
    sim.wait_for(r"Load weight begin\.")
    assert sim.status("/health") == 503
    assert sim.stop() == 0
    assert "fired up" not in sim.text()


def test_unusable_tokenizer_json_is_reported_and_serving_goes_on(launch, tmp_path):
    from backend.sim.models import make_target_dir
    target = make_target_dir(tmp_path / "target")
    (target / "tokenizer.json").write_text("{torn")
    sim = launch(["--model-path", str(target), "--skip-server-warmup"])
    sim.wait_ready()
    sim.wait_for(re.escape(f"WARNING: cannot use {target / 'tokenizer.json'}: ") +
                 r".*; counting tokens with the built-in simulated tokenizer")
    st, raw = sim.request("/v1/completions", {"prompt": "The capital city of France is", "max_tokens": 2})
    assert st == 200 and json.loads(raw)["usage"]["prompt_tokens"] == 7
