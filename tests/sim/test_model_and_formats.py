"""Pure checks of the simulator's line formats and speed model (no process)."""

import pytest

from backend.sim.engine import SpecPlan, Speed, expected_accept_len, p_for_accept_len
from backend.sim.logfmt import Flavor


def _decode(version, accept_len=2.17, steps=3, ndt=4):
    f = Flavor.of(version)
    rate = f.accept_rate(accept_len, steps, ndt) if f.has_accept_rate else None
    return f.decode_line(forward_ct=40, running=2, tokens=900, token_usage=0.01, accept_len=accept_len,
                         accept_rate=rate, cuda_graph=True, gen_throughput=82.3, queue=0)


def test_labels_and_trailing_commas():
    assert _decode("0.4.6").startswith("Decode batch. #running-req: 2, ")
    assert _decode("0.4.6").endswith("#queue-req: 0")
    assert _decode("0.4.10").endswith("#queue-req: 0, ")
    assert _decode("0.5.4").startswith("Decode batch [40], ")
    assert _decode("0.5.5").startswith("Decode batch, ") and _decode("0.5.5").endswith(", ")
    assert _decode("0.5.10").endswith("#queue-req: 0")
    assert "accept rate" not in _decode("0.5.3")


def test_accept_rate_meaning_per_version():
    # 0.5.4: accept_len / (steps + 1), as in the real log 2.17 -> 0.54
    assert "accept rate: 0.54," in _decode("0.5.4", 2.17, 3, 4)
    # 0.5.23: (accept_len - 1) / (draft_tokens - 1); 1.67 with 6 draft tokens -> 0.13
    assert "accept rate: 0.13," in _decode("0.5.23", 1.67, 5, 6)


def test_prefix_rules():
    f = Flavor.of("0.5.23", {"SGLANG_LOG_MS": "1"})
    assert f.prefix(0, 1, now=0.25).endswith(".250] ")
    assert f.prefix(0, 2, now=0.25).endswith(".250 TP0] ")
    old = Flavor.of("0.5.4", {"SGLANG_LOG_MS": "1"})  # milliseconds only from 0.5.10
    assert not old.prefix(0, 1, now=0.25).endswith(".250] ") and " TP" not in old.prefix(0, 1)
    it = Flavor.of("0.5.5", {"SGLANG_LOG_FORWARD_ITERS": "1"})
    assert it.decode_line(forward_ct=7, running=1, tokens=1, token_usage=0, accept_len=None, accept_rate=None,
                          cuda_graph=False, gen_throughput=1, queue=0).startswith("Decode batch [7], ")


def test_speed_model_matches_the_story():
    base = Speed()
    assert 1 / base.iteration(1, True) == pytest.approx(90, rel=0.01)
    assert 256 / base.iteration(256, True) == pytest.approx(830, rel=0.02)
    # accept_len 2.1 with 5 draft tokens is slower than no speculation (about 82 tok/s)
    spec = Speed(plan=SpecPlan(algorithm="EAGLE3", num_steps=4, topk=1, num_draft_tokens=5))
    assert 2.1 / spec.iteration(1, True) == pytest.approx(82, abs=2)
    # a good draft (accept_len 3.0 at 3 steps) is a speedup
    good = Speed(plan=SpecPlan(algorithm="EAGLE3", num_steps=3, topk=1, num_draft_tokens=4))
    assert 3.0 / good.iteration(1, True) > 120
    assert base.iteration(1, False) > base.iteration(1, True)


def test_accept_probability_inverse():
    p = p_for_accept_len(2.6, 3)
    assert expected_accept_len(p, 3) == pytest.approx(2.6, abs=1e-6)


def _engine(seed, plan):
    import io

    from backend.sim.engine import Engine
    from backend.sim.output import Output
    buf = io.StringIO()
    fl = Flavor.of("0.5.23")
    eng = Engine(out=Output(fl, out=buf, err=buf), flavor=fl, speed=Speed(baseline=3000, peak=30000, plan=plan),
                 max_running=8, max_total_tokens=100000, context_len=4096, decode_log_interval=5,
                 cuda_graph_max_bs=8, disable_cuda_graph=False, model_name="m", seed=seed)
    eng.start()
    return eng, buf


def _run(eng, prompt, n):
    req = eng.submit(prompt, max_new_tokens=n)
    while req.events.get(timeout=10)[0] != "done":
        pass
    return req


def test_engine_is_deterministic_with_a_seed():
    plan = SpecPlan(algorithm="EAGLE3", num_steps=3, topk=1, num_draft_tokens=4, accept_p=0.6)
    results = []
    for _ in range(2):
        eng, buf = _engine(5, plan)
        try:
            r = _run(eng, "same prompt", 60)
            results.append((r.text, r.verify_ct, r.accepted_drafts))
        finally:
            eng.stop()
    assert results[0] == results[1]
    assert results[0][1] < 60  # several tokens per verify step
    eng, buf = _engine(6, plan)
    try:
        other = _run(eng, "same prompt", 60)
    finally:
        eng.stop()
    assert (other.text, other.verify_ct) != results[0][:2]


def test_broken_plan_accepts_nothing():
    plan = SpecPlan(algorithm="EAGLE", num_steps=3, topk=1, num_draft_tokens=4, accept_p=0.9, broken=True)
    eng, buf = _engine(1, plan)
    try:
        r = _run(eng, "x", 30)
    finally:
        eng.stop()
    assert r.accepted_drafts == 0 and r.verify_ct == 29  # first token comes from prefill
    assert "accept len: 1.00, accept rate: 0.00," in buf.getvalue()


def test_a_short_stall_of_the_host_is_made_up_and_idle_time_is_not():
    """The modelled work runs on a schedule: a thread that could not run for 0.3 s (the machine busy elsewhere)
    does the next 0.1 s of work without waiting, so the pace over a run stays the model's; a schedule left
    behind by more than CATCH_UP_S (idle, or a long stall) starts again from now and waits the full cost."""
    import time

    from backend.sim.engine import CATCH_UP_S, Engine
    from backend.sim.output import Output
    import io

    fl = Flavor.of("0.5.23")
    buf = io.StringIO()
    eng = Engine(out=Output(fl, out=buf, err=buf), flavor=fl, speed=Speed(baseline=3000, peak=30000, plan=SpecPlan()),
                 max_running=8, max_total_tokens=100000, context_len=4096, decode_log_interval=5,
                 cuda_graph_max_bs=8, disable_cuda_graph=False, model_name="m", seed=1)
    eng._next_deadline = time.monotonic() - 0.3  # the last work should have ended 0.3 s ago
    t0 = time.monotonic()
    eng._sleep_until(0.1)
    assert time.monotonic() - t0 < 0.05 and eng.clock_s == pytest.approx(0.1)
    eng._next_deadline = time.monotonic() - (CATCH_UP_S + 1.0)  # too far behind: not made up
    t0 = time.monotonic()
    eng._sleep_until(0.1)
    assert time.monotonic() - t0 >= 0.095 and eng.clock_s == pytest.approx(0.2)


def test_a_request_in_its_prefill_is_counted_in_flight():
    """Off the queue and in its prefill, a request is neither waiting nor decoding yet; the live count
    (/get_load) still counts it: a drain that read 0 there ended while the request had its whole answer ahead."""
    import threading
    import time

    eng, _ = _engine(3, SpecPlan())
    gate, entered = threading.Event(), threading.Event()
    modelled = eng._sleep_until

    def held(cost: float) -> None:  # the first modelled work is the prefill: held until the count is read
        if not entered.is_set():
            entered.set()
            gate.wait(10)
        modelled(cost)

    eng._sleep_until = held
    try:
        req = eng.submit("a prompt", max_new_tokens=20)
        assert entered.wait(10)
        assert eng.counts() == (1, 0)
        gate.set()
        while req.events.get(timeout=10)[0] != "done":
            pass
        assert eng.counts() == (0, 0) and req.finish_reason == "length"
    finally:
        gate.set()
        eng.stop()
