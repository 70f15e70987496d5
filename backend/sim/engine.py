"""The simulated scheduler: what the model and draft look like, how fast a batch runs,
how many draft tokens are accepted, and the batch loop that prints Decode/Prefill lines.

Timing model (all figures in real seconds, never scaled by SPECDECK_SIM_SPEED):
- One target forward for a batch of ``bs`` requests takes ``(bs + c) / peak`` where
  ``c = peak / baseline - 1``: one stream decodes at ``baseline`` tok/s (default 90) and the
  aggregate saturates towards ``peak`` (default 860, about 830 at 256 concurrent streams).
- With speculation one iteration is a verify step over ``num_draft_tokens`` tokens
  (``target * (1 + VERIFY_COST * (draft_tokens - 1))``) plus ``num_steps`` draft forwards
  (``DRAFT_COST * target`` each). Each request then gains 1 + (accepted drafts) tokens.
  With accept_len 2.1 and 5 draft tokens this is about 82 tok/s against 90 without
  speculation; a draft with accept_len 3 at 3 steps gives about 135 tok/s.
- The modelled time is also kept as a simulated clock (``Engine.clock_s``: the sum of every
  prefill and iteration cost, idle time excluded), and each finished request's moments on
  both clocks are kept (``Engine.finished``, served at ``GET /sim/requests``): what the
  simulator delivered, in real and in simulated seconds, whatever else the machine was doing.
- The work runs on a schedule, as a GPU's does whatever its host's CPU is doing: a round that starts late
  because the machine was busy elsewhere (up to ``CATCH_UP_S``) is made up by the rounds after it.
- A draft token is accepted with probability ``p`` while the previous one was (a chain,
  depth ``num_steps``), so accept_len = 1 + p + p^2 + ... An EAGLE-3 draft served with
  ``--speculative-algorithm EAGLE`` gets final hidden states instead of the three-layer
  concatenation; its fc layer is skipped and nothing is ever accepted: accept_len 1.00.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import queue
import random
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.readcap import CONFIG_JSON_MAX, SAFETENSORS_HEADER_MAX, load_json_capped
from backend.sim.metrics import Metrics
from backend.sim.output import Output
from backend.sim.request import Request
from backend.sim.tokenizer import SimTokenizer, TokenPiece

VERIFY_COST = 0.05
DRAFT_COST = 0.276
NO_GRAPH_PENALTY = 1.35
PREFILL_TOK_S = 24000.0
DEFAULT_ACCEPT_P = 0.55
CATCH_UP_S = 0.5  # a schedule this far behind (the host busy elsewhere) is made up; further, it starts again
FINISHED_KEPT = 4096  # finished requests whose timings are kept for GET /sim/requests

MTP_ARCHS = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM",
             "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM")



# --------------------------------------------------------------------------------------
# What is on disk
# --------------------------------------------------------------------------------------
@dataclass
class ModelInfo:
    path: str
    architecture: str = "LlamaForCausalLM"
    model_type: str = "llama"
    hidden_size: int = 4096
    num_layers: int = 32
    vocab_size: int = 128256
    num_kv_heads: int = 8
    head_dim: int = 128
    context_len: int = 131072
    weight_bytes: int = 0
    shards: int = 1
    found: bool = False

    @classmethod
    def read(cls, path: str | None) -> "ModelInfo":
        info = cls(path=path or "")
        cfg = _read_json(Path(path) / "config.json") if path else None
        if cfg:
            info.found = True
            info.architecture = (cfg.get("architectures") or [info.architecture])[0]
            info.model_type = cfg.get("model_type", info.model_type)
            info.hidden_size = int(cfg.get("hidden_size", info.hidden_size))
            info.num_layers = int(cfg.get("num_hidden_layers", info.num_layers))
            info.vocab_size = int(cfg.get("vocab_size", info.vocab_size))
            heads = int(cfg.get("num_attention_heads", max(1, info.hidden_size // 128)))
            info.num_kv_heads = int(cfg.get("num_key_value_heads", heads))
            info.head_dim = int(cfg.get("head_dim", info.hidden_size // max(1, heads)))
            info.context_len = int(cfg.get("max_position_embeddings", info.context_len))
        h, n, v = info.hidden_size, info.num_layers, info.vocab_size
        params = 12 * n * h * h + 2 * v * h
        info.weight_bytes = 2 * params
        shard_files = sorted(Path(path).glob("*.safetensors")) if info.found else []
        info.shards = len(shard_files) or max(1, math.ceil(info.weight_bytes / 5e9))
        return info


@dataclass
class DraftInfo:
    path: str
    found: bool = False
    architecture: str = ""
    hidden_size: int = 0
    fc_in: int | None = None
    weight_bytes: int = 0
    num_aux: int = 3
    target_hidden_size: int | None = None

    @property
    def is_eagle3(self) -> bool:
        return self.architecture.endswith("Eagle3")

    @classmethod
    def read(cls, path: str | None) -> "DraftInfo":
        info = cls(path=path or "")
        cfg = _read_json(Path(path) / "config.json") if path else None
        if not cfg:
            return info
        info.found = True
        info.architecture = (cfg.get("architectures") or [""])[0]
        info.hidden_size = int(cfg.get("hidden_size", 0))
        if cfg.get("target_hidden_size"):
            info.target_hidden_size = int(cfg["target_hidden_size"])
        ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        info.num_aux = int(cfg.get("num_aux_hidden_states") or (len(ids) if ids else 3))
        for st in sorted(Path(path).glob("*.safetensors")):
            header = _safetensors_header(st)
            if header is None:
                continue
            fc = header.get("fc.weight") or header.get("model.fc.weight")
            if fc and len(fc.get("shape", [])) == 2:
                info.fc_in = int(fc["shape"][1])
            info.weight_bytes += max(0, st.stat().st_size - 8)
        return info


def _read_json(p: Path) -> dict | None:
    try:
        return load_json_capped(p, CONFIG_JSON_MAX)
    except (OSError, ValueError):
        return None


def _safetensors_header(p: Path) -> dict | None:
    try:
        with open(p, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            if n > SAFETENSORS_HEADER_MAX:
                return None
            return json.loads(fh.read(n))
    except (OSError, ValueError, struct.error):
        return None


# --------------------------------------------------------------------------------------
# Speculative plan and speed
# --------------------------------------------------------------------------------------
@dataclass
class SpecPlan:
    algorithm: str | None = None      # after NEXTN -> EAGLE
    num_steps: int = 0
    topk: int = 1
    num_draft_tokens: int = 1
    accept_p: float = 0.0             # per-draft-token acceptance probability
    broken: bool = False              # EAGLE-3 draft served as EAGLE: nothing accepted
    draft_forwards: int | None = None # draft model forwards per iteration (None: num_steps)
    draft: DraftInfo | None = None
    # (text, p): a prompt holding ``text`` is drafted with acceptance ``p`` (the first that matches)
    accept_p_by_text: tuple[tuple[str, float], ...] = ()

    def p_for(self, prompt: str) -> float:
        for text, p in self.accept_p_by_text:
            if text in prompt:
                return p
        return self.accept_p

    @property
    def on(self) -> bool:
        return self.algorithm is not None


def expected_accept_len(p: float, steps: int) -> float:
    return sum(p ** i for i in range(steps + 1))


def p_for_accept_len(target: float, steps: int) -> float:
    lo, hi = 0.0, 0.999
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_accept_len(mid, steps) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass
class Speed:
    baseline: float = 90.0
    peak: float = 860.0
    plan: SpecPlan = field(default_factory=SpecPlan)

    def target_step(self, bs: int) -> float:
        c = max(0.0, self.peak / self.baseline - 1.0)
        return (max(1, bs) + c) / self.peak

    @property
    def draft_forwards(self) -> int:
        p = self.plan
        return p.num_steps if p.draft_forwards is None else p.draft_forwards

    def iteration(self, bs: int, cuda_graph: bool) -> float:
        t = self.target_step(bs)
        if self.plan.on:
            t = t * (1 + VERIFY_COST * (self.plan.num_draft_tokens - 1)) \
                + self.draft_forwards * DRAFT_COST * self.target_step(bs)
        return t if cuda_graph else t * NO_GRAPH_PENALTY


# --------------------------------------------------------------------------------------
# The scheduler
# --------------------------------------------------------------------------------------
class Engine:
    def __init__(self, *, out: Output, flavor, speed: Speed, max_running: int,
                 max_total_tokens: int, context_len: int, decode_log_interval: int,
                 cuda_graph_max_bs: int, disable_cuda_graph: bool, model_name: str,
                 seed: int, max_prefill_tokens: int = 16384,
                 tokenizer: SimTokenizer | None = None, requests_log: str | None = None) -> None:
        self.out = out
        # each finished request's row also appended here as a JSON line, with this run's id (a server
        # started again is another run): what every run of a server delivered, after it has stopped
        self.requests_log = requests_log
        self.run_id = uuid.uuid4().hex[:12]
        self.tokenizer = tokenizer or SimTokenizer.builtin()
        self.flavor = flavor
        self.speed = speed
        self.plan = speed.plan
        self.max_running = max(1, max_running)
        self.max_total_tokens = max(1, max_total_tokens)
        self.context_len = context_len
        self.interval = max(1, decode_log_interval)
        self.cuda_graph_max_bs = cuda_graph_max_bs
        self.max_prefill_tokens = max(1, max_prefill_tokens)
        self.disable_cuda_graph = disable_cuda_graph
        self.seed = seed
        self.rng = random.Random(seed)
        self.metrics = Metrics(model_name, flavor, self.plan.on)

        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._waiting: list[Request] = []
        self._running: list[Request] = []
        self._prefilling: list[Request] = []  # off the queue, in the prefill now: in flight, as SGLang counts them
        self._thread: threading.Thread | None = None
        self._req_counter = 0
        self._cache: dict[str, int] = {}

        self.forward_ct = 0
        self.decode_ct = 0
        self.clock_s = 0.0  # simulated seconds of modelled work (prefills and iterations)
        self.finished: collections.deque[dict[str, Any]] = collections.deque(maxlen=FINISHED_KEPT)
        now = time.monotonic()
        self._last_decode_tic = now
        self._last_prefill_tic = now
        self._next_deadline = now
        self._int_tokens = 0
        self._int_reqsteps = 0
        self._int_accepted = 0
        self._cum_tokens = 0
        self._cum_reqsteps = 0
        self.last_gen_throughput = 0.0
        self.last_accept_len: float | None = None
        self.last_cuda_graph = not disable_cuda_graph

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sim-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """End the scheduler; every request still queued or running finishes with ``abort``, as
        SGLang answers the requests it holds when it shuts down (``finish_reason: "abort"``)."""
        with self._cv:
            for r in self._waiting + self._prefilling + self._running:
                self._finish(r, "abort")
            self._stop.set()
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- public API -------------------------------------------------------------------
    def submit(self, prompt: str, *, max_new_tokens: int | None, ignore_eos: bool = False,
               prompt_tokens: int | None = None, stop: tuple[str, ...] = (),
               stop_token_ids: frozenset[int] = frozenset(), top_logprobs: int | None = None,
               index: int = 0, events: "queue.Queue[tuple[str, Any]] | None" = None) -> Request:
        """Queue one request. ``prompt_tokens`` defaults to the tokenizer's count of the
        prompt with BOS; ``events`` lets several requests (n > 1) report to one queue."""
        with self._cv:
            self._req_counter += 1
            n = self._req_counter
        rid = uuid.UUID(int=random.Random(f"{self.seed}:{n}").getrandbits(128)).hex
        rng = random.Random(f"{self.seed}:{n}:{prompt[:64]}")
        ptoks = prompt_tokens if prompt_tokens is not None else len(self.tokenizer.prompt_ids(prompt))
        room = max(1, self.context_len - ptoks)
        natural = room if ignore_eos else rng.randint(48, 480)
        max_new = room if max_new_tokens is None else max(0, min(int(max_new_tokens), room))
        p = self.plan.p_for(prompt)
        if self.plan.on and not self.plan.broken:
            p = min(0.97, max(0.02, rng.gauss(p, 0.04)))
        req = Request(rid=rid, prompt=prompt, prompt_tokens=ptoks, max_new=max_new,
                      natural_len=natural, rng=rng, p=p, tokenizer=self.tokenizer, stop=tuple(stop),
                      stop_token_ids=frozenset(stop_token_ids), top_logprobs=top_logprobs, index=index)
        if events is not None:
            req.events = events
        with self._cv:
            req.v_created = self.clock_s
            if self._stop.is_set():  # submitted as the server stops: SGLang aborts it, it never runs
                self._finish(req, "abort")
                return req
            key = hashlib.sha1(prompt.encode("utf-8", "replace")).hexdigest()
            req.cached_tokens = min(self._cache.get(key, 0), max(0, ptoks - 1))
            self._cache[key] = ptoks
            if len(self._cache) > 10000:
                self._cache.clear()
            self._waiting.append(req)
            self._cv.notify_all()
        return req

    def cancel(self, req: Request) -> None:
        req.cancelled = True

    def finished_requests(self) -> list[dict[str, Any]]:
        """The kept finished requests, oldest first: rid, finish reason, token counts and their
        moments (created, first token, finished) in real (monotonic) and simulated seconds."""
        with self._lock:
            return [dict(x) for x in self.finished]

    def _log_finished(self, row: dict[str, Any]) -> None:
        try:
            with open(self.requests_log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"run": self.run_id, **row}) + "\n")
        except OSError as exc:  # the log is a record beside the serving: a failed write stops the record only
            self.out.rank(f"[sim] SPECDECK_SIM_REQUESTS_LOG {self.requests_log}: {exc}; no further rows are written")
            self.requests_log = None

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self._running) + len(self._prefilling), len(self._waiting)

    @property
    def avg_spec_accept_length(self) -> float | None:
        if not self.plan.on or self._cum_reqsteps == 0:
            return None
        return self._cum_tokens / self._cum_reqsteps

    def used_tokens(self) -> int:
        return sum(r.prompt_tokens + r.generated for r in self._running)

    # -- loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._cv:
                self._running = [r for r in self._running if not (r.cancelled and self._finish(r, "abort"))]
                admit: list[Request] = []
                budget = self.max_prefill_tokens  # one prefill batch takes at most this many new tokens
                while self._waiting and len(self._running) + len(admit) < self.max_running:
                    r = self._waiting[0]
                    need = r.prompt_tokens - r.cached_tokens
                    if admit and need > budget:
                        break
                    self._waiting.pop(0)
                    if r.cancelled:
                        self._finish(r, "abort")
                    else:
                        admit.append(r)
                        budget -= need
                self._prefilling = admit
                if not admit and not self._running:
                    self._cv.wait(0.2)
                    self._next_deadline = time.monotonic()  # idle: the next work starts from when it comes
                    continue
            if admit:
                self._prefill(admit)
            if self._running and not self._stop.is_set():
                self._decode_step()

    def _sleep_until(self, cost: float) -> None:
        """Wait out ``cost`` seconds of modelled work, on a schedule: the work ends ``cost`` after the previous
        work ended, not after now.  A GPU's pace does not follow its host's CPU: a moment the machine was too
        busy to run this thread (up to CATCH_UP_S behind) is made up by the next rounds, which then follow each
        other without a wait; further behind, or after idle, the schedule starts again from now."""
        self.clock_s += cost
        now = time.monotonic()
        if now - self._next_deadline > CATCH_UP_S:
            self._next_deadline = now
        self._next_deadline += cost
        delay = self._next_deadline - now
        if delay > 0:
            self._stop.wait(delay)

    def _graph(self, bs: int) -> bool:
        return not self.disable_cuda_graph and bs <= self.cuda_graph_max_bs

    def _prefill(self, reqs: list[Request]) -> None:
        new_tokens = sum(r.prompt_tokens - r.cached_tokens for r in reqs)
        cached = sum(r.cached_tokens for r in reqs)
        self._sleep_until(0.006 + new_tokens / PREFILL_TOK_S)
        now = time.monotonic()
        with self._cv:
            if self._stop.is_set():  # taken off the queue, not yet running: stop() did not see them
                for r in reqs:
                    self._finish(r, "abort")
                self._prefilling = []
                return
            running_before = len(self._running)
            self._running.extend(reqs)
            self._prefilling = []
            queue_len = len(self._waiting)
            pending = sum(r.prompt_tokens for r in self._waiting)
            usage = self.used_tokens() / self.max_total_tokens
        gap = max(1e-6, now - self._last_prefill_tic)
        self._last_prefill_tic = now
        self.out.rank(self.flavor.prefill_line(
            forward_ct=self.forward_ct + 1, new_seq=len(reqs), new_token=new_tokens,
            cached_token=cached, token_usage=usage, running=running_before, queue=queue_len,
            pending_token=pending, cuda_graph=False, input_throughput=new_tokens / gap))
        self.forward_ct += 1
        m = self.metrics
        m.num_running_reqs.set(running_before + len(reqs))
        m.num_queue_reqs.set(queue_len)
        m.token_usage.set(round(usage, 4))
        tot = new_tokens + cached
        m.cache_hit_rate.set(cached / tot if tot else 0.0)
        for r in reqs:
            m.prompt_tokens.inc(r.prompt_tokens)
            m.cached_tokens.inc(r.cached_tokens)
            if r.max_new == 0:
                continue
            self._emit(r, r.next_tokens(1), now)  # the first token comes out of prefill
        with self._cv:
            self._running = [r for r in self._running if not self._maybe_finish(r)]

    def _emit(self, r: Request, pieces: list[TokenPiece], now: float) -> int:
        kept = r.add_tokens(pieces)
        if r.first_token_at is None:
            r.first_token_at = now
            r.v_first_token = self.clock_s
            self.metrics.ttft.observe(now - r.created)
        elif r.last_token_at is not None and kept:
            per = (now - r.last_token_at) / len(kept)
            for _ in kept:
                self.metrics.itl.observe(per)
        r.last_token_at = now
        self.metrics.generation_tokens.inc(len(kept))
        r.events.put(("tokens", r))
        return len(kept)

    def _maybe_finish(self, r: Request) -> bool:
        if r.cancelled:
            return self._finish(r, "abort")
        if r.stopped:
            return self._finish(r, "stop")
        if r.generated >= r.target_len:
            if r.max_new > r.natural_len:
                r.matched_stop = self.tokenizer.eos_id  # the model ended its answer
                return self._finish(r, "stop")
            return self._finish(r, "length")
        return False

    def _finish(self, r: Request, reason: str) -> bool:
        if r.finish_reason is None:
            r.finish_reason = reason
            r.finished_at = time.monotonic()
            r.v_finished = self.clock_s
            row = {"rid": r.rid, "finish_reason": reason, "prompt_tokens": r.prompt_tokens,
                   "completion_tokens": r.generated, "created": r.created, "first_token": r.first_token_at,
                   "finished": r.finished_at, "v_created": r.v_created, "v_first_token": r.v_first_token,
                   "v_finished": r.v_finished}
            self.finished.append(row)
            if self.requests_log:
                self._log_finished(row)
            self.metrics.num_requests.inc()
            self.metrics.e2e.observe(r.finished_at - r.created)
            r.events.put(("done", r))
        return True

    def _draw(self, r: Request, remaining: int) -> tuple[int, int]:
        """(tokens produced, drafts accepted) for one iteration of one request."""
        plan = self.plan
        if not plan.on:
            return 1, 0
        accepted = 0
        if not plan.broken:
            depth = plan.num_steps
            p = r.p
            if plan.topk > 1:
                p = 1 - (1 - p) ** (1 + 0.35 * math.log2(plan.topk))
            while accepted < depth and r.rng.random() < p:
                accepted += 1
        n = min(accepted + 1, remaining)
        return n, max(0, n - 1)

    def _decode_step(self) -> None:
        with self._cv:
            batch = list(self._running)
        bs = len(batch)
        graph = self._graph(bs)
        self._sleep_until(self.speed.iteration(bs, graph))
        if self._stop.is_set():
            return
        now = time.monotonic()
        produced = 0
        accepted_total = 0
        for r in batch:
            if r.cancelled or r.finish_reason is not None:
                continue
            n, acc = self._draw(r, max(1, r.target_len - r.generated))
            if self.plan.on:
                r.verify_ct += 1
                r.accepted_drafts += acc
                r.proposed_drafts += max(1, self.plan.num_draft_tokens - 1)
                r.accept_hist[acc] = r.accept_hist.get(acc, 0) + 1
            produced += self._emit(r, r.next_tokens(n), now)
            accepted_total += acc
        with self._cv:
            self._running = [r for r in self._running if not self._maybe_finish(r)]
            running_now = len(self._running)
            queue_len = len(self._waiting)
        self.forward_ct += 1
        self.decode_ct += 1
        self._int_tokens += produced
        self._int_reqsteps += bs
        self._int_accepted += accepted_total
        self.last_cuda_graph = graph
        if self.metrics.spec_verify_calls is not None:
            self.metrics.spec_verify_calls.inc(bs)
        if self.decode_ct % self.interval == 0:
            self._log_decode(now, bs, running_now, queue_len, graph)

    def _log_decode(self, now: float, bs: int, running_now: int, queue_len: int, graph: bool) -> None:
        gap = max(1e-6, now - self._last_decode_tic)
        self._last_decode_tic = now
        thr = self._int_tokens / gap
        self.last_gen_throughput = thr
        accept_len = accept_rate = None
        if self.plan.on and self._int_reqsteps:
            accept_len = self._int_tokens / self._int_reqsteps
            accept_rate = self.flavor.accept_rate(accept_len, self.plan.num_steps, self.plan.num_draft_tokens)
            self._cum_tokens += self._int_tokens
            self._cum_reqsteps += self._int_reqsteps
            self.last_accept_len = accept_len
        with self._cv:
            used = self.used_tokens()
        usage = used / self.max_total_tokens
        self.out.rank(self.flavor.decode_line(
            forward_ct=self.forward_ct, running=bs, tokens=used, token_usage=usage,
            accept_len=accept_len, accept_rate=accept_rate, cuda_graph=graph,
            gen_throughput=thr, queue=queue_len))
        m = self.metrics
        m.num_running_reqs.set(running_now)
        m.num_queue_reqs.set(queue_len)
        m.num_used_tokens.set(used)
        m.token_usage.set(round(usage, 4))
        m.gen_throughput.set(round(thr, 2))
        if m.is_cuda_graph is not None:
            m.is_cuda_graph.set(1 if graph else 0)
        if accept_len is not None:
            m.spec_accept_length.set(round(accept_len, 4))
            if m.spec_accept_rate is not None:
                m.spec_accept_rate.set(round(accept_rate, 4))
        self._int_tokens = self._int_reqsteps = self._int_accepted = 0
