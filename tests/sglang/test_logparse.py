"""The log parser on lines of every format in the reference (fixtures written from the formats)."""

from __future__ import annotations

import re
import time

import pytest

from backend.sglang.logparse import (
    BadBatchLine, DecodeBatch, FatalEvent, Phase, PhaseEvent, PrefillBatch, looks_like_prefixed_line,
    parse_line, parse_prefix,
)


def epoch(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S"))


# (line, expected attributes)
DECODE_CASES = [
    # 2024-08: "Decode batch." no graph field, no spec
    ("[2024-08-05 10:11:12] Decode batch. #running-req: 1010, #token: 55006, token usage: 0.93, "
     "gen throughput (token/s): 1397.13, #queue-req: 12279",
     dict(running_req=1010, num_token=55006, token_usage=0.93, gen_throughput=1397.13, queue_req=12279,
          accept_len=None, graph=None, ranks=(), iter=None)),
    # before PR #6201: spec adds accept len, still no graph
    ("[2025-04-01 08:00:00 TP0] Decode batch. #running-req: 2, #token: 900, token usage: 0.01, accept len: 2.41, "
     "gen throughput (token/s): 150.20, #queue-req: 0",
     dict(accept_len=2.41, accept_rate=None, graph=None, ranks=(("TP", 0),))),
    # 0.4.6.post5: accept len + pre-allocated usage + cuda graph, no trailing comma
    ("[2025-05-31 18:31:21 DP0 TP0] Decode batch. #running-req: 48, #token: 31000, token usage: 0.21, "
     "accept len: 1.00, pre-allocated usage: 0.05, cuda graph: True, gen throughput (token/s): 431.55, #queue-req: 3",
     dict(accept_len=1.0, graph=True, graph_label="cuda graph", ranks=(("DP", 0), ("TP", 0)), queue_req=3,
          fields_extra={"pre_allocated_usage": 0.05})),
    # 0.4.10.post2: trailing ", ", PD retracted
    ("[2025-08-03 12:00:01 TP0] Decode batch. #running-req: 7, #token: 4000, token usage: 0.02, cuda graph: True, "
     "gen throughput (token/s): 88.00, #queue-req: 0, ",
     dict(running_req=7, queue_req=0, graph=True, gen_throughput=88.0)),
    ("[2025-08-03 12:00:02 TP0] Decode batch. #running-req: 7, #token: 4000, token usage: 0.02, #retracted-req: 1, "
     "cuda graph: False, gen throughput (token/s): 88.00, #queue-req: 2, ",
     dict(graph=False, fields_extra={"retracted_req": 1})),
    # 0.4.10 SWA hybrid
    ("[2025-08-03 12:00:03] Decode batch. #running-req: 5, #full token: 1200, full token usage: 0.10, "
     "#swa token: 600, swa token usage: 0.05, cuda graph: True, gen throughput (token/s): 99.90, #queue-req: 0, ",
     dict(num_token=1200, token_usage=0.10, fields_extra={"swa_token": 600, "swa_token_usage": 0.05})),
    # 0.5.3: still "Decode batch." and only accept len
    ("[2025-10-06 09:00:00 TP0] Decode batch. #running-req: 1, #token: 300, token usage: 0.00, accept len: 3.12, "
     "cuda graph: True, gen throughput (token/s): 201.33, #queue-req: 0, ",
     dict(accept_len=3.12, accept_rate=None)),
    # main between 0.5.3 and 0.5.4 (0.5.3.post3): accept rate appears
    ("[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 1133, token usage: 0.01, accept len: 2.17, "
     "accept rate: 0.54, cuda graph: True, gen throughput (token/s): 171.51, #queue-req: 0, ",
     dict(accept_len=2.17, accept_rate=0.54)),
    # 0.5.4: "Decode batch [N]," always, cpu graph label
    ("[2025-10-24 11:00:00 TP0] Decode batch [12840], #running-req: 4, #token: 800, token usage: 0.00, "
     "accept len: 1.90, accept rate: 0.47, cpu graph: False, gen throughput (token/s): 12.50, #queue-req: 0, ",
     dict(iter=12840, graph_label="cpu graph", graph=False, accept_rate=0.47)),
    # 0.5.5: "Decode batch," trailing comma
    ("[2025-11-11 04:06:27] Decode batch, #running-req: 32, #token: 50000, token usage: 0.33, accept len: 2.50, "
     "accept rate: 0.62, cuda graph: True, gen throughput (token/s): 700.10, #queue-req: 1, ",
     dict(iter=None, ranks=(), running_req=32, accept_len=2.5)),
    # 0.5.5 with SGLANG_LOG_FORWARD_ITERS
    ("[2025-11-11 04:06:28] Decode batch [77], #running-req: 32, #token: 50000, token usage: 0.33, "
     "cuda graph: True, gen throughput (token/s): 700.10, #queue-req: 1, ",
     dict(iter=77)),
    # 0.5.10: no trailing comma, ms in prefix
    ("[2026-04-08 14:05:21.123 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, "
     "cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
     dict(running_req=5, gen_throughput=144.95, ts_ms=0.123)),
    # 0.5.23 with PD decode fields (reference example)
    ("[2026-08-14 14:02:47 TP0] Decode batch, #running-req: 3, #token: 266624, token usage: 0.43, accept len: 1.67, "
     "accept rate: 0.13, pre-allocated usage: 0.22, #prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, "
     "cuda graph: True, gen throughput (token/s): 183.10, #queue-req: 0",
     dict(accept_len=1.67, accept_rate=0.13, fields_extra={"transfer_req": 1, "prealloc_req": 0})),
    # 0.5.16/0.5.23: DSpark cap len, block accept len, npu graph, host receive, MFU
    ("[2026-10-30 01:00:00 PP1 TP3] Decode batch, #running-req: 8, #token: 1000, token usage: 0.01, "
     "accept len: 3.40, accept rate: 0.60, cap len: 4.00, block accept len: 3.10, #host-receive-req: 2, "
     "npu graph: True, gen throughput (token/s): 512.00, #queue-req: 0, est. decode TFLOPS/s (per GPU): 12.5, "
     "est. read BW (GB/s per GPU): 900.1, est. write BW (GB/s per GPU): 20.2",
     dict(graph_label="npu graph", ranks=(("PP", 1), ("TP", 3)),
          fields_extra={"cap_len": 4.0, "block_accept_len": 3.1, "host_receive_req": 2, "decode_tflops": 12.5,
                        "read_bw_gbs": 900.1, "write_bw_gbs": 20.2})),
    # hybrid SSM and HiSparse
    ("[2026-10-30 01:00:01] Decode batch, #running-req: 2, #full token: 10, full token usage: 0.01, mamba num: 4, "
     "mamba usage: 0.02, musa graph: True, gen throughput (token/s): 50.00, #queue-req: 0",
     dict(num_token=10, token_usage=0.01, graph_label="musa graph", fields_extra={"mamba_num": 4, "mamba_usage": 0.02})),
    ("[2026-10-30 01:00:02] Decode batch, #running-req: 2, #token: 10, token usage: 0.01, #gpu token: 6, "
     "gpu token usage: 0.30, #cpu token: 4, cpu token usage: 0.10, cuda graph: True, "
     "gen throughput (token/s): 50.00, #queue-req: 0",
     dict(fields_extra={"gpu_token": 6, "gpu_token_usage": 0.3, "cpu_token": 4, "cpu_token_usage": 0.1})),
    # field order shuffled and an unknown key (kept, typed)
    ("[2026-10-30 01:00:03 TP0] Decode batch, #queue-req: 9, gen throughput (token/s): 10.00, new thing: 7, "
     "cuda graph: True, mode: fancy, #running-req: 1, token usage: 0.50, #token: 5, accept len: 1.50",
     dict(queue_req=9, running_req=1, accept_len=1.5, fields_extra={"new thing": 7, "mode": "fancy"})),
    # every rank tag, ms
    ("[2026-09-24 01:50:43.001 DP2 PP1 ATTN_CP1 MOE_DP3 TP6 EP6] Decode batch, #running-req: 1, #token: 5, "
     "token usage: 0.00, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0",
     dict(ranks=(("DP", 2), ("PP", 1), ("ATTN_CP", 1), ("MOE_DP", 3), ("TP", 6), ("EP", 6)))),
    # Ray actor prefix (with ip)
    ("(SGLangEngine pid=41820, ip=10.0.0.7) [2026-03-22 13:53:37 TP0] Decode batch, #running-req: 16, "
     "#token: 9000, token usage: 0.05, cuda graph: True, gen throughput (token/s): 640.00, #queue-req: 0",
     dict(ray_pid=41820, ranks=(("TP", 0),), running_req=16)),
    # dictConfig style
    ("2025-12-04 20:35:53 INFO 151972 [scheduler_metrics_mixin.py:287] Decode batch. #running-req: 64, "
     "#token: 70000, token usage: 0.70, accept len: 2.05, accept rate: 0.51, cuda graph: True, "
     "gen throughput (token/s): 820.40, #queue-req: 0, ",
     dict(ranks=(), accept_len=2.05, running_req=64, ts_text="2025-12-04 20:35:53")),
]


_SECOND_IN_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}")


def check_record(rec, line: str, expect: dict) -> None:
    """``rec`` holds the table's values, and the timestamp written in the line itself."""
    expect = dict(expect)
    extra = expect.pop("fields_extra", {})
    ms = expect.pop("ts_ms", None)
    for k, v in expect.items():
        got = getattr(rec, k)
        assert got == (pytest.approx(v) if isinstance(v, float) else v), (k, got, v)
    for k, v in extra.items():
        assert rec.fields[k] == (pytest.approx(v) if isinstance(v, float) else v), k
    second = _SECOND_IN_TEXT.search(line).group(0)  # from the line's text, not from the parser
    assert rec.ts == pytest.approx(epoch(second) + (ms or 0.0))
    assert rec.ts_text.startswith(second)
    for name in ("running_req", "queue_req"):
        assert isinstance(getattr(rec, name), int)


@pytest.mark.parametrize("line,expect", DECODE_CASES, ids=[f"decode{i}" for i in range(len(DECODE_CASES))])
def test_decode_lines(line, expect):
    for text in (line, line + "\n"):
        rec = parse_line(text)
        assert isinstance(rec, DecodeBatch), text
        check_record(rec, line, expect)


PREFILL_CASES = [
    # ~2025-01 with cache hit rate percent
    ("[2025-01-09 10:00:00] Prefill batch. #new-seq: 1, #new-token: 48, #cached-token: 0, cache hit rate: 0.00%, "
     "token usage: 0.00, #running-req: 0, #queue-req: 0",
     dict(new_seq=1, new_token=48, cached_token=0, token_usage=0.0, running_req=0, queue_req=0,
          fields_extra={"cache_hit_rate_pct": 0.0})),
    # 0.4.6: no trailing comma
    ("[2025-05-24 10:00:00 TP0] Prefill batch. #new-seq: 2, #new-token: 1024, #cached-token: 512, token usage: 0.05, "
     "#running-req: 3, #queue-req: 1",
     dict(new_seq=2, new_token=1024, cached_token=512, running_req=3, queue_req=1, graph=None)),
    # 0.4.10: trailing ", ", SWA variant, PD prefill names of the time
    ("[2025-08-03 12:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 64, #cached-token: 0, full token usage: 0.01, "
     "swa token usage: 0.02, #unbootstrapped-req: 1, #transferring-req: 2, #running-req: 0, #queue-req: 0, "
     "input throughput (token/s): 500.00, ",
     dict(token_usage=0.01, input_throughput=500.0,
          fields_extra={"swa_token_usage": 0.02, "unbootstrapped_req": 1, "transferring_req": 2})),
    # 0.5.4 with iteration
    ("[2025-10-24 11:00:00 TP0] Prefill batch [12841], #new-seq: 1, #new-token: 7, #cached-token: 0, "
     "token usage: 0.00, #running-req: 0, #queue-req: 0, #prealloc-req: 0, #inflight-req: 1, ",
     dict(iter=12841, fields_extra={"inflight_req": 1, "prealloc_req": 0})),
    # 0.5.10: cuda graph + input throughput at the end, no trailing comma
    ("[2026-04-05 09:00:00] Prefill batch, #new-seq: 4, #new-token: 4096, #cached-token: 128, token usage: 0.10, "
     "#running-req: 2, #queue-req: 0, cuda graph: False, input throughput (token/s): 12000.50",
     dict(graph=False, graph_label="cuda graph", input_throughput=12000.5)),
    # 2026-05: reversed order of the last two
    ("[2026-05-02 09:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 10, #cached-token: 0, token usage: 0.00, "
     "#running-req: 0, #queue-req: 0, input throughput (token/s): 321.00, cuda graph: False",
     dict(input_throughput=321.0, graph=False)),
    # 0.5.23 reference example
    ("[2026-08-23 09:09:50 TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, "
     "full token usage: 0.01, swa token usage: 0.01, #running-req: 0, #queue-req: 1, #pending-token: 46401, "
     "cuda graph: False, input throughput (token/s): 8072.80",
     dict(new_token=8192, queue_req=1, token_usage=0.01, input_throughput=8072.8, ranks=(("TP", 0), ("EP", 0)),
          fields_extra={"pending_token": 46401})),
    # 0.5.23 PD prefill, replay token, TFLOPS
    ("[2026-10-30 02:00:00 DP1 TP1] Prefill batch, #new-seq: 2, #new-token: 100, #cached-token: 50, "
     "token usage: 0.02, #running-req: 1, #queue-req: 0, #pending-token: 0, #replay-token: 3, #bootstrap-req: 1, "
     "#inflight-req: 0, #optimistic-req: 2, cuda graph: False, input throughput (token/s): 900.00, "
     "est. prefill TFLOPS/s (per GPU): 80.5",
     dict(fields_extra={"replay_token": 3, "bootstrap_req": 1, "optimistic_req": 2, "prefill_tflops": 80.5})),
]


@pytest.mark.parametrize("line,expect", PREFILL_CASES, ids=[f"prefill{i}" for i in range(len(PREFILL_CASES))])
def test_prefill_lines(line, expect):
    rec = parse_line(line + "\n")
    assert isinstance(rec, PrefillBatch)
    check_record(rec, line, expect)
    assert "accept_len" not in rec.fields


@pytest.mark.parametrize("line", [
    "[2026-01-01 00:00:00] Decode batch, #running-req: abc, #queue-req: 0",
    "[2026-01-01 00:00:00] Decode batch, #running-req 3, #queue-req: 0",
    "[2026-01-01 00:00:00] Decode batch [x], #running-req: 3",
    "[2026-01-01 00:00:00] Decode batch, cuda graph: Maybe, #queue-req: 0",
    "[2026-01-01 00:00:00] Decode batch, ",
])
def test_malformed_batch_lines_raise_with_a_reason(line):
    with pytest.raises(BadBatchLine) as exc:
        parse_line(line)
    assert str(exc.value)


@pytest.mark.parametrize("line", [
    '[2025-11-06 01:22:14] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    '[2025-11-06 01:22:14] INFO:     127.0.0.1:51234 - "GET /metrics HTTP/1.1" 200 OK',
    "[2025-11-06 01:22:14 TP0] Cache flushed successfully!",
    "",
    "   ",
    "a batch of something unrelated",
    "[2025-11-06 01:22:14] the Decode batchsize is large",
])
def test_other_lines_are_none(line):
    assert parse_line(line) is None


STARTUP = [
    ("[2025-11-06 01:20:00] server_args=ServerArgs(model_path='/m', speculative_algorithm='EAGLE3')",
     Phase.LAUNCHED, None),
    ("[2025-11-06 01:20:01 TP0] Init torch distributed begin.", Phase.INIT, None),
    ("[2025-11-06 01:20:05 TP0] Init torch distributed ends. mem usage=0.50 GB", Phase.INIT, None),
    ("[2025-11-06 01:20:06 TP0] Load weight begin. avail mem=78.12 GB", Phase.WEIGHTS, 0.0),
    # progress counters: the share done from the counts, finer than tqdm's rounded percent
    ("Loading safetensors checkpoint shards:  45% Completed | 27/61 [00:30<00:38,  1.1it/s]", Phase.WEIGHTS,
     100 * 27 / 61),
    ("Loading safetensors checkpoint shards:  10% Completed | 6/61 [00:05<00:50]\rLoading safetensors checkpoint "
     "shards:  20% Completed | 12/61 [00:10<00:40]", Phase.WEIGHTS, 100 * 12 / 61),
    ("[2025-11-06 01:21:06 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.0 GB, "
     "mem usage=16.1 GB.", Phase.WEIGHTS, 100.0),
    ("[2026-10-30 01:21:06 TP0] Load weight end. elapsed=61.2 s, type=DeepseekV3ForCausalLM, avail mem=10.0 GB, "
     "mem usage=60.1 GB.", Phase.WEIGHTS, 100.0),
    ("[2025-11-06 01:21:07 TP0] Using KV cache dtype: torch.bfloat16", Phase.KV_CACHE, None),
    ("[2025-11-06 01:21:07 TP0] KV Cache is allocated. #tokens: 413000, K size: 25.2 GB, V size: 25.2 GB",
     Phase.KV_CACHE, None),
    ("[2026-10-30 01:21:07 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 413000, KV size: 25.2 GB",
     Phase.KV_CACHE, None),
    ("[2025-11-06 01:21:08 TP0] Memory pool end. avail mem=11.5 GB", Phase.KV_CACHE, None),
    ("[2025-11-06 01:21:08 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=11.4 GB",
     Phase.CUDA_GRAPH, 0.0),
    ("Capturing batches (bs=160 avail_mem=11.2 GB):  37%|███▋      | 13/35 [00:04<00:07,  2.9it/s]",
     Phase.CUDA_GRAPH, 100 * 13 / 35),
    # newest format (real line shapes): weights by a thread pool, graphs compiled and captured by token count
    ("Multi-thread loading shards:  75% Completed | 3/4 [00:02<00:00,  1.30it/s]", Phase.WEIGHTS, 75.0),
    ("Multi-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]Multi-thread loading shards: 100% "
     "Completed | 1/1 [00:00<00:00,  7.38it/s]", Phase.WEIGHTS, 100.0),
    ("  0%|          | 0/58 [00:00<?, ?it/s]Compiling num tokens (num_tokens=8192):   0%|          | 0/58 "
     "[00:00<?, ?it/s]", Phase.CUDA_GRAPH, 0.0),
    ("Compiling num tokens (num_tokens=7680):   3%|▎         | 2/58 [00:06<02:31,  2.71s/it]Compiling num tokens "
     "(num_tokens=7168):   3%|▎         | 2/58 [00:06<02:31,  2.71s/it]", Phase.CUDA_GRAPH, 100 * 2 / 58),
    ("Capturing num tokens (num_tokens=7680 avail_mem=42.29 GB):   3%|▎         | 2/58 [00:01<00:40,  1.39it/s]",
     Phase.CUDA_GRAPH, 100 * 2 / 58),
    ("Capturing num tokens (num_tokens=4 avail_mem=41.00 GB): 100%|██████████| 58/58 [00:20<00:00,  2.9it/s]",
     Phase.CUDA_GRAPH, 100.0),
    # a bar without counts: the percent it prints
    ("Capturing num tokens (num_tokens=4 avail_mem=41.00 GB):  40%|████", Phase.CUDA_GRAPH, 40.0),
    ("[2025-11-06 01:21:30 TP0] Capture cuda graph end. Time elapsed: 22.1 s. mem usage=0.9 GB. avail mem=10.5 GB.",
     Phase.CUDA_GRAPH, 100.0),
    ("[2026-10-30 01:21:08 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=4, "
     "avail mem=11.4 GB", Phase.CUDA_GRAPH, 0.0),
    ("[2026-10-30 01:21:30 TP0] Capture target verify CUDA graph end. bs=[1, 2, 4], elapsed=22.1 s, "
     "mem usage=0.9 GB, avail mem=10.5 GB.", Phase.CUDA_GRAPH, 100.0),
    ("[2025-11-06 01:21:31 TP0] Capture draft cuda graph begin. This can take up to several minutes. avail mem=10 GB",
     Phase.CUDA_GRAPH, 0.0),
    ("[2025-11-06 01:21:40 TP0] Capture draft extend cuda graph end. Time elapsed: 3.0 s. mem usage=0.1 GB.",
     Phase.CUDA_GRAPH, 100.0),
    ("[2025-11-06 01:21:41 TP0] max_total_num_tokens=413000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
     "max_running_requests=48, context_len=131072, available_gpu_mem=10.4 GB", Phase.WARMUP, None),
    ("[2025-11-06 01:21:42] INFO:     Application startup complete.", Phase.WARMUP, None),
    ("[2025-11-06 01:21:42] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
     Phase.WARMUP, None),
    ('[2025-11-06 01:21:43] INFO:     127.0.0.1:40000 - "GET /get_model_info HTTP/1.1" 200 OK', Phase.WARMUP, None),
    ("[2025-11-06 01:21:45] The server is fired up and ready to roll!", Phase.READY, 100.0),
]


@pytest.mark.parametrize("line,phase,percent", STARTUP, ids=[f"startup{i}" for i in range(len(STARTUP))])
def test_startup_phases(line, phase, percent):
    ev = parse_line(line)
    assert isinstance(ev, PhaseEvent), line
    assert ev.phase == phase
    assert ev.percent == percent
    if line.startswith("[20"):
        assert ev.ts == epoch(line[1:20])
    assert ev.new_run == line.startswith("[2025-11-06 01:20:00] server_args=")


FATALS = [
    ("[2025-11-06 01:21:07 TP0] Scheduler hit an exception: Traceback (most recent call last):",
     "scheduler_exception", "fatal", None),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
     "self.server_args.mem_fraction_static=0.5", "not_enough_memory", "fatal",
     "Please try to increase --mem-fraction-static."),
    ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB",
     "cuda_graph_capture_failed", "fatal", None),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79 GiB",
     "cuda_oom", "fatal", None),
    ("[2025-11-06 01:30:00] Received sigquit from a child process. It usually means the child failed.",
     "child_failed", "fatal", None),
    ("[2025-11-06 01:30:00 TP0] Watchdog timeout (self.watchdog_timeout=300)", "watchdog_timeout", "fatal", None),
    ("RuntimeError: Initialization failed. Please see the error messages above.", "init_failed", "fatal", None),
    ("launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
     "--cuda-graph-max-bs-prefill", "bad_arguments", "fatal", None),
    ("[2025-11-06 01:30:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
     "health_check_failed", "warning", None),
    ("[2025-11-06 01:30:00 TP0] Decode out of memory. Try to lower your batch size.", "batch_oom", "warning",
     "Try to lower your batch size."),
    ("[2025-11-06 01:30:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
     "#aborted_retracted_reqs: 0, #new_token_ratio: 0.7 -> 1.0", "kv_retract", "warning", None),
]


@pytest.mark.parametrize("line,code,severity,hint", FATALS, ids=[f[1] for f in FATALS])
def test_fatal_lines(line, code, severity, hint):
    ev = parse_line(line)
    assert isinstance(ev, FatalEvent), line
    assert (ev.code, ev.severity) == (code, severity)
    assert ev.hint
    if hint:
        assert ev.hint == hint
    assert ev.message and not ev.message.startswith("[")


def test_prefix_parsing_and_cache():
    ts, text, ranks, ray = parse_prefix("(SGLangEngine pid=7) [2026-03-22 13:53:37.250 DP1 TP1] ")
    assert ray == 7 and ranks == (("DP", 1), ("TP", 1)) and text == "2026-03-22 13:53:37.250"
    assert ts == pytest.approx(epoch("2026-03-22 13:53:37") + 0.25)
    assert parse_prefix("(SGLangEngine pid=7) [2026-03-22 13:53:37.250 DP1 TP1] ")[0] == ts
    assert parse_prefix("") == (None, "", (), None)


def test_prefixed_line_detection():
    assert looks_like_prefixed_line("[2025-11-06 01:21:07 TP0] x")
    assert looks_like_prefixed_line("(SGLangEngine pid=1) [2025-11-06 01:21:07] x")
    assert looks_like_prefixed_line("2025-12-04 20:35:53 INFO 151972 [a.py:1] x")
    assert not looks_like_prefixed_line('  File "/x/scheduler.py", line 10, in run')
    assert not looks_like_prefixed_line("Possible solutions:")
    assert not looks_like_prefixed_line("1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)")


def test_many_lines_at_once_give_the_table_values_and_isolate_bad_lines():
    from backend.sglang.logparse import parse_batch_lines

    cases = DECODE_CASES + PREFILL_CASES
    lines = [c[0] for c in cases]
    expects = [c[1] for c in cases]
    lines, expects = lines + lines + ["[2026-01-01 00:00:00] not a batch line"], expects + expects + [None]
    # same key sequence as DECODE_CASES[12], one value broken: only that line is bad
    broken = DECODE_CASES[12][0].replace("#running-req: 3", "#running-req: three")
    lines.insert(5, broken)
    expects.insert(5, None)
    recs, bad = parse_batch_lines(lines)
    assert bad == [(5, "field '#running-req': 'three' is not a valid value")]
    for line, rec, expect in zip(lines, recs, expects):
        if expect is None:
            assert rec is None
            continue
        assert rec.kind == ("decode" if "Decode batch" in line else "prefill")
        check_record(rec, line, expect)
