"""The built-in benchmark client against the simulator, started as a real process on 127.0.0.1.

Expected figures come from the simulator's documented timing model (backend/sim/engine.py),
worked out by hand here: one target forward for a batch of ``bs`` takes ``(bs + c) / peak`` with
``c = peak / baseline - 1``.  The simulators here run at half the default speeds, baseline 45 tok/s
and peak 430 tok/s (``c = 8.5556`` as with the defaults), so that each step is long beside the
simulator's own work between steps:

- No speculation, 4 in flight: a step takes (4 + 8.5556) / 430 = 29.20 ms and gives 4 tokens:
  4 / 0.02920 = 137.0 tok/s.
- EAGLE3, 3 steps, top-k 1, 4 draft tokens, accept length 2.1: an iteration is the verify step
  29.20 ms x (1 + 0.05 x 3) plus 3 draft forwards of 0.276 x 29.20 ms = 29.20 x 1.978 = 57.76 ms
  and gives each request 2.1 tokens: 4 x 2.1 / 0.05776 = 145.4 tok/s.

Those figures are checked on the simulator's own clock (``GET /sim/requests``: each request's
moments in simulated seconds, which only the model's step costs advance), and the client's figures
against the simulator's record of the same requests by what must come before what on the machine's
one monotonic clock (``tests/bench/served.check_timed``).  Neither check depends on the machine being
quiet.
"""

from __future__ import annotations

import pytest

from backend.bench.client import Load, Outcome, _chunk_tokens, run_load, summarize
from backend.flows.bench_runner import Target, run_benchmark
from tests.bench.served import client_runs, served_checked as _served, within as _within
from tests.sim.simproc import Sim, start_sim as sim_process
from tests.simws import make_models

NO_SPEC_TOK_S = 137.0
SPEC_TOK_S = 145.4
STEP_MS = 29.20
ACCEPT_LEN = 2.1
LOAD = Load(concurrency=4, num_prompts=8, input_len=32, output_len=128)
SPEEDS = {"SPECDECK_SIM_BASELINE_TOK_S": "45", "SPECDECK_SIM_PEAK_TOK_S": "430"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return make_models(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def start_sim(tmp_path_factory):
    started: list[Sim] = []

    def _start(args: list[str], env: dict[str, str] | None = None) -> Sim:
        log = tmp_path_factory.mktemp("sim") / "server.log"
        sim = sim_process(["--enable-metrics", *args], log,
                          {"SPECDECK_SIM_SPEED": "200", "SPECDECK_SIM_SEED": "1", **SPEEDS, **(env or {})})
        started.append(sim)
        sim.wait_ready()
        return sim

    yield _start
    for sim in started:
        sim.stop()


def _spec(models) -> list[str]:
    target, draft = models
    return ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--decode-log-interval", "5"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_baseline_tok_s_matches_the_simulator(start_sim, models, tmp_path, monkeypatch):
    sim = start_sim(["--model-path", str(models[0])])
    runs = client_runs(monkeypatch)
    r = run_benchmark(Target(sim.base, name="sim", log_path=sim.log), LOAD, mode="builtin", work_dir=tmp_path)
    f = r.results
    assert f.completed == 8 and r.load.concurrency == 4 and r.load.output_len == 128
    [run] = runs
    served = _served(sim, run)
    assert served["tokens"] == 8 * 128
    # the timing model, on the simulator's clock
    assert _within(served["v_tok_s"], NO_SPEC_TOK_S), served
    assert _within(served["v_tpot_ms"], STEP_MS), served  # one step per token at 4 in flight
    # the client's figure is what it measured (checked against what the simulator delivered in _served)
    assert f.output_tok_s == pytest.approx(run.summary()["output_throughput"])
    # every request gave exactly output_len tokens: requests/s is tok/s / 128
    assert f.request_s == pytest.approx(f.output_tok_s / 128)
    assert _within(f.tpot_ms.median, served["tpot_ms"]), (f.tpot_ms, served)
    assert not r.speculative and f.accept_len is None and f.accept_len_lifetime is None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_speculative_tok_s_and_windowed_accept_len_from_metrics(start_sim, models, tmp_path, monkeypatch):
    sim = start_sim(_spec(models), {"SPECDECK_SIM_ACCEPT_LEN": str(ACCEPT_LEN)})
    runs = client_runs(monkeypatch)
    r = run_benchmark(Target(sim.base, name="sim", log_path=sim.log), LOAD, mode="builtin", work_dir=tmp_path)
    f = r.results
    assert _within(f.accept_len, ACCEPT_LEN), f.accept_len
    [run] = runs
    served = _served(sim, run)
    # the timing model at the accept length these requests drew (SPEC_TOK_S is at exactly 2.1)
    assert _within(served["v_tok_s"], SPEC_TOK_S * f.accept_len / ACCEPT_LEN), (served, f.accept_len)
    assert f.output_tok_s == pytest.approx(run.summary()["output_throughput"])
    assert "metrics" in (r.label or "")  # 0.5.23 has the spec_verify_calls counter
    assert f.accept_len_lifetime is not None  # /server_info's, kept beside
    c = r.config
    assert (c.algorithm, c.num_steps, c.topk, c.num_draft_tokens, c.cuda_graph, c.tp, c.sglang_version) == \
        ("EAGLE3", 3, 1, 4, True, 1, "0.5.23")
    assert c.target_model == str(models[0]) and c.draft_model == str(models[1])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_windowed_accept_len_from_the_log_where_metrics_lack_counters(start_sim, models, tmp_path, monkeypatch):
    sim = start_sim(_spec(models), {"SPECDECK_SIM_ACCEPT_LEN": str(ACCEPT_LEN), "SPECDECK_SIM_VERSION": "0.5.4"})
    # earlier traffic at another load: the lifetime value includes it, the window does not
    run_load(sim.base, Load(concurrency=1, num_prompts=2, input_len=8, output_len=40))
    runs = client_runs(monkeypatch)
    r = run_benchmark(Target(sim.base, name="sim", log_path=sim.log), LOAD, mode="builtin", work_dir=tmp_path)
    assert "log" in (r.label or "")
    assert _within(r.results.accept_len, ACCEPT_LEN), r.results.accept_len
    [run] = runs
    served = _served(sim, run)
    assert _within(served["v_tok_s"], SPEC_TOK_S * r.results.accept_len / ACCEPT_LEN), (served, r.results.accept_len)
    assert r.results.output_tok_s == pytest.approx(run.summary()["output_throughput"])
    assert r.config.sglang_version == "0.5.4"


@pytest.mark.timeout(120)
def test_chat_backend_counts_tokens_and_latencies(start_sim, models):
    sim = start_sim(["--model-path", str(models[0])])
    run = run_load(sim.base, Load(concurrency=2, num_prompts=4, input_len=16, output_len=24,
                                  backend="sglang-oai-chat"))
    s = run.summary()
    assert s["completed"] == 4 and s["total_output_tokens"] == 4 * 24
    # the final usage is shared over the text chunks, by their text: a gap for every token after the first
    # chunk's, 23 when each chunk carries one token; a stream that runs behind the engine (on a busy
    # machine, as SGLang's does) carries two in a chunk, and the share can give the first chunk two
    for o in run.outcomes:
        assert 0 < len(o.itl) <= 23, len(o.itl)
        assert 0 < sum(o.itl) <= o.latency - o.ttft + 1e-6, (sum(o.itl), o.latency, o.ttft)
    assert s["mean_ttft_ms"] > 0 and s["p99_e2e_latency_ms"] >= s["median_e2e_latency_ms"] > 0


def test_summary_matches_a_hand_worked_table():
    # two requests over 2.0 s: 10 and 4 output tokens
    a = Outcome(ok=True, prompt_len=100, output_len=10, ttft=0.1, latency=1.0, itl=[0.1] * 9)
    b = Outcome(ok=True, prompt_len=100, output_len=4, ttft=0.3, latency=0.6, itl=[0.05, 0.1, 0.15])
    failed = Outcome(ok=False, error="HTTP 500")
    s = summarize([a, b, failed], 2.0)
    assert s["completed"] == 2 and s["failed"] == 1
    assert s["output_throughput"] == pytest.approx(7.0)  # 14 tokens / 2 s
    assert s["request_throughput"] == pytest.approx(1.0)
    assert s["total_throughput"] == pytest.approx(107.0)
    # TPOT: (1.0 - 0.1) / 9 = 100 ms and (0.6 - 0.3) / 3 = 100 ms
    assert s["mean_tpot_ms"] == pytest.approx(100.0)
    assert s["mean_ttft_ms"] == pytest.approx(200.0) and s["median_ttft_ms"] == pytest.approx(200.0)
    # numpy's linear p90 of [100, 300] ms: 100 + 0.9 x 200 = 280
    assert s["p90_ttft_ms"] == pytest.approx(280.0)
    # twelve ITLs: nine of 100 ms, then 50, 100, 150: mean 100; p99 = 150 - 0.11 x 50 = 144.5
    assert s["mean_itl_ms"] == pytest.approx(100.0)
    assert s["p99_itl_ms"] == pytest.approx(144.5)
    assert s["mean_e2e_latency_ms"] == pytest.approx(800.0)
    assert s["concurrency"] == pytest.approx(0.8)  # 1.6 s of requests over 2 s


def test_chat_chunk_tokens():
    # per-chunk usage streamed: differences
    assert _chunk_tokens([(0, 5, 1), (1, 9, 3), (2, 2, 4)], 4) == [1, 2, 1]
    # only a final total of 7 over three chunks of 2, 4 and 2 characters: one each, four more by text
    assert _chunk_tokens([(0, 2, None), (1, 4, None), (2, 2, None)], 7) == [2, 3, 2]
    # no usage at all: a token per chunk
    assert _chunk_tokens([(0, 3, None), (1, 3, None)], None) == [1, 1]


def test_bad_load_is_refused_with_the_field_named():
    from backend.bench.client import ClientError

    with pytest.raises(ClientError, match="concurrency must be at least 1"):
        run_load("http://127.0.0.1:9", Load(concurrency=0))
    with pytest.raises(ClientError, match="backend 'vllm'"):
        run_load("http://127.0.0.1:9", Load(backend="vllm"))


def test_a_chunk_of_several_tokens_is_split_evenly():
    """Speculative decoding streams several tokens in one chunk: bench_serving's native backend
    gives each of them the chunk's gap divided by their number; so does the client."""
    import asyncio

    from aiohttp import web

    from backend.bench.client import run_load_async

    async def generate(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for n, text in ((1, "a"), (3, "a b c"), (4, "a b c d")):  # 1 token, then 2, then 1
            await resp.write(f'data: {{"text": "{text}", "meta_info": {{"completion_tokens": {n}}}}}\n\n'.encode())
            await asyncio.sleep(0.02)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def go():
        app = web.Application()
        app.router.add_post("/generate", generate)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            return await run_load_async(f"http://127.0.0.1:{port}",
                                        Load(concurrency=1, num_prompts=2, input_len=4, output_len=4))
        finally:
            await runner.cleanup()

    run = asyncio.run(go())
    for o in run.outcomes:
        assert o.ok and o.output_len == 4 and len(o.itl) == 3
        assert o.itl[0] == o.itl[1] > 0  # the two tokens of the second chunk share its gap
        # per token, not per chunk: the gaps add up to the time from the first chunk to the last
        assert sum(o.itl) <= o.latency - o.ttft


def test_failed_requests_are_counted_apart():
    import asyncio

    from aiohttp import web

    from backend.bench.client import run_load_async

    seen = {"n": 0}

    async def generate(request: web.Request) -> web.StreamResponse:
        seen["n"] += 1
        if seen["n"] % 3 == 0:  # every third request (the warm-up is the first)
            return web.Response(status=500, text="boom")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"text": "a", "meta_info": {"completion_tokens": 1}}\n\ndata: [DONE]\n\n')
        return resp

    async def go():
        app = web.Application()
        app.router.add_post("/generate", generate)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            return await run_load_async(f"http://127.0.0.1:{port}",
                                        Load(concurrency=1, num_prompts=6, input_len=4, output_len=1))
        finally:
            await runner.cleanup()

    run = asyncio.run(go())
    s = run.summary()
    # requests 2..7 after the warm-up: the 3rd and 6th fail
    assert (s["completed"], s["failed"]) == (4, 2) and s["total_output_tokens"] == 4
    assert run.errors() == ["HTTP 500: boom", "HTTP 500: boom"]
