"""HTTP side of the simulated server: dispatch, SGLang's native routes and what they share.

The OpenAI-compatible routes live in backend/sim/openai_routes.py; request parameters and
error answers in backend/sim/sampling.py. The handler only reads the simulator (``sim``:
backend.sim.server.Sim) and its engine.
"""

from __future__ import annotations

import json
import queue
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterator
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from backend.sim import openai_routes
from backend.sim.logprobs import NativeLogprobs, native_logprobs
from backend.sim.request import Request
from backend.sim.sampling import ApiError, check_request, native_sampling, schema_error

AUTH_EXEMPT = ("/health", "/health_generate", "/metrics", "/ready")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    sim: Any  # the running backend.sim.server.Sim, set on the subclass (which imports this module)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence default log
        return

    # -- helpers ----------------------------------------------------------------------
    def _access(self, status: int) -> None:
        self.sim.out.access(self.client_address[1], self.command, self.path, status)

    def send_body(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self._access(status)
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, obj: Any) -> None:
        self.send_body(status, json.dumps(obj).encode())

    def _body(self) -> dict[str, Any] | None:
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n > 0 else b""
        if not raw:
            return {}
        try:
            obj = json.loads(raw)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    def _authorized(self, path: str) -> bool:
        key = self.sim.ns.api_key
        if not key or path in AUTH_EXEMPT:
            return True
        return self.headers.get("authorization", "") == f"Bearer {key}"

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        self._access(200)

    def sse(self, obj: Any) -> None:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def events(self, q: "queue.Queue[tuple[str, Any]]", count: int = 1) -> Iterator[tuple[str, Request]]:
        """Events of ``count`` requests reporting to ``q`` until each has ended; stops on shutdown."""
        open_ = count
        while open_ > 0:
            try:
                kind, req = q.get(timeout=0.2)
            except queue.Empty:
                eng = self.sim.engine
                # the engine's stop finishes what it holds (abort) before it is stopping: once it
                # is, an empty queue means nothing more comes
                if self.sim.stop.is_set() and (eng is None or eng.stopping):
                    return
                continue
            if kind != "tokens":
                open_ -= 1
            yield kind, req

    def wait_all(self, reqs: list[Request]) -> None:
        q = reqs[0].events
        for _ in self.events(q, len(reqs)):
            pass

    def not_ready(self) -> bool:
        if self.sim.engine is None:
            self.send_json(503, {"error": "Server is not ready"})
            return True
        return False

    # -- dispatch ---------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def _dispatch(self, method: str) -> None:
        sim = self.sim
        path = self.path.split("?", 1)[0]
        try:
            body = self._body() if method in ("POST", "PUT") else {}
            if not sim.http_up or sim.stop.is_set():
                return self.send_json(503, {"error": "Server is not ready"})
            if not self._authorized(path):
                return self.send_json(401, {"error": "Unauthorized"})
            fl = sim.flavor
            if path in ("/health", "/health_generate"):
                ok = sim.ready or (path == "/health" and not fl.health_waits_ready)
                return self.send_body(200 if ok else 503, b"")
            if path == "/sim/requests" and method == "GET":  # the simulator's own, not SGLang's
                eng = sim.engine
                return self.send_json(200, {"clock_s": eng.clock_s if eng else 0.0,
                                            "finished": eng.finished_requests() if eng else []})
            if path == "/get_load" and method == "GET":  # SGLang's live load per data-parallel rank
                running, waiting = sim.engine.counts() if sim.engine else (0, 0)
                return self.send_json(200, [{"dp_rank": 0, "num_reqs": running + waiting,
                                             "num_waiting_reqs": waiting,
                                             "num_tokens": sim.engine.used_tokens() if sim.engine else 0}])
            if path == "/ready" and fl.has_ready_endpoint:
                return self.send_body(200 if sim.ready else 503, b"")
            if path in ("/get_server_info", "/server_info") and method == "GET":
                if path == "/server_info" and not fl.new_info_paths:
                    return self.send_json(404, {"detail": "Not Found"})
                if path == "/get_server_info" and fl.new_info_paths:
                    sim.out.main("Endpoint '/get_server_info' is deprecated and will be removed in a future "
                                 "version. Please use '/server_info' instead.", level=30)
                return self.send_json(200, sim.server_info())
            if path in ("/get_model_info", "/model_info") and method == "GET":
                if path == "/model_info" and not fl.new_info_paths:
                    return self.send_json(404, {"detail": "Not Found"})
                if path == "/get_model_info" and fl.new_info_paths:
                    sim.out.main("Endpoint '/get_model_info' is deprecated and will be removed in a future "
                                 "version. Please use '/model_info' instead.", level=30)
                return self.send_json(200, sim.model_info())
            if path == "/v1/models" and method == "GET":
                return self.send_json(200, {"object": "list", "data": [self._model_card()]})
            if path.startswith("/v1/models/") and method == "GET":
                return self._retrieve_model(path[len("/v1/models/"):])
            if path == "/metrics" and method == "GET" and sim.ns.enable_metrics and sim.engine:
                return self.send_body(200, generate_latest(sim.engine.metrics.registry), CONTENT_TYPE_LATEST)
            if path == "/flush_cache" and method in ("GET", "POST"):
                return self._flush_cache()
            if body is None:
                return self.send_json(400, ApiError("Invalid JSON body", err_type="Bad Request").openai_body())
            if path == "/generate" and method in ("POST", "PUT"):
                return self._generate(body)
            if path == "/v1/chat/completions" and method == "POST":
                return openai_routes.chat(self, body)
            if path == "/v1/completions" and method == "POST":
                return openai_routes.completions(self, body)
            return self.send_json(404, {"detail": "Not Found"})
        except (BrokenPipeError, ConnectionResetError):
            return

    # -- models -----------------------------------------------------------------------
    def _model_card(self) -> dict[str, Any]:
        sim = self.sim
        return {"id": sim.served_name, "object": "model", "created": int(sim.start_time),
                "owned_by": "sglang", "root": sim.served_name, "parent": None,
                "max_model_len": sim.context_len}

    def _retrieve_model(self, model_id: str) -> None:
        model_id = unquote(model_id)
        if model_id != self.sim.served_name:
            return self.send_json(404, {"error": {"message": f"The model '{model_id}' does not exist",
                                                  "type": "invalid_request_error", "param": "model",
                                                  "code": "model_not_found"}})
        return self.send_json(200, self._model_card())

    def _flush_cache(self) -> None:
        sim = self.sim
        running, waiting = sim.engine.counts() if sim.engine else (0, 0)
        text = ("Cache flushed.\nPlease check backend logs for more details. (When there are running or "
                "waiting requests, the operation will not be performed.)\n")
        if running or waiting:
            sim.out.rank(f"Cache not flushed because there are pending requests. #queue-req: {waiting}, "
                         f"#running-req: {running}", level=30)
            return self.send_body(400, text.encode(), "text/plain; charset=utf-8")
        sim.out.rank("Cache flushed successfully!")
        return self.send_body(200, text.encode(), "text/plain; charset=utf-8")

    # -- /generate --------------------------------------------------------------------
    def meta(self, req: Request, started: float, final: bool = True) -> dict[str, Any]:
        """SGLang's meta_info; ``final`` False gives an intermediate chunk's (no finish yet)."""
        fl, plan = self.sim.flavor, self.sim.plan
        reason = req.finish_reason if final else None
        if reason == "length":
            fr: Any = {"type": "length", "length": req.generated}
        elif reason == "stop":
            fr = {"type": "stop", "matched": req.matched_stop}
        elif reason == "abort":
            fr = {"type": "abort", "message": "Abort before the request finished."}
        else:
            fr = None
        m: dict[str, Any] = {"id": req.rid, "finish_reason": fr, "prompt_tokens": req.prompt_tokens,
                             "weight_version": "default"}
        if fl.v >= (0, 5, 23):
            m["num_retractions"] = req.num_retractions
        m.update(completion_tokens=req.generated, cached_tokens=req.cached_tokens)
        if plan.on and reason is not None:
            vc = req.verify_ct
            m["spec_verify_ct"] = vc
            if fl.v >= (0, 5, 4):
                alen = req.generated / vc if vc else 0.0
                if fl.strict_accept_rate:
                    m["spec_accept_rate"] = req.accepted_drafts / req.proposed_drafts if req.proposed_drafts else 0.0
                    m["spec_accept_length"] = alen
                    m["spec_num_correct_drafts"] = req.accepted_drafts
                    m["spec_num_proposed_drafts"] = req.proposed_drafts
                    m["spec_correct_drafts_histogram"] = _hist(req.accept_hist, plan.num_steps)
                elif fl.v >= (0, 5, 10):
                    drafts = vc * max(1, plan.num_draft_tokens - 1)
                    m["spec_accept_length"] = alen
                    m["spec_accept_rate"] = req.accepted_drafts / drafts if drafts else 0.0
                    m["spec_accept_token_num"] = req.accepted_drafts
                    m["spec_draft_token_num"] = drafts
                    m["spec_accept_histogram"] = _hist(req.accept_hist, plan.num_steps)
                else:
                    m["spec_accept_length"] = alen
                    m["spec_accept_rate"] = (req.accepted_drafts / (vc * plan.num_steps)
                                             if vc and plan.num_steps else 0.0)
        if req.native_logprobs is not None:
            m.update(native_logprobs(self.sim.tokenizer, req, req.native_logprobs))
        if reason is not None:
            m["e2e_latency"] = round(time.monotonic() - started, 6)
        return m

    def _out(self, req: Request, started: float, final: bool = True) -> dict[str, Any]:
        return {"text": req.text, "output_ids": list(req.output_ids), "meta_info": self.meta(req, started, final)}

    def _generate(self, body: dict[str, Any]) -> None:
        if self.not_ready():
            return
        sim = self.sim
        try:
            sp = native_sampling(body.get("sampling_params"))
            text, ids = body.get("text"), body.get("input_ids")
            if text is None and ids is None:
                raise ApiError("Either text or input_ids should be provided.")
            if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
                raise schema_error("input_ids", "Input should be a valid list of integers", ids, "list_type")
        except ApiError as e:
            return self.send_json(e.status, e.native_body())
        eng = sim.engine
        assert eng is not None
        started = time.monotonic()

        try:
            lp = _logprob_options(body)
        except ApiError as e:
            return self.send_json(e.status, e.native_body())

        def submit(prompt: str, pids: list[int], q: "queue.Queue[tuple[str, Any]]", index: int) -> Request:
            r = eng.submit(prompt, max_new_tokens=sp.max_new_tokens, ignore_eos=sp.ignore_eos,
                           prompt_tokens=len(pids), stop=sp.stop, stop_token_ids=sp.stop_token_ids,
                           top_logprobs=None if lp is None else lp.top, index=index, events=q)
            if lp is not None:
                r.native_logprobs = NativeLogprobs(lp.top, lp.with_text, lp.start, tuple(pids))
            return r

        q: "queue.Queue[tuple[str, Any]]" = queue.Queue()
        if isinstance(text, list):
            prompts = [(str(t), sim.tokenizer.prompt_ids(str(t))) for t in text]
        elif text is not None:
            prompts = [(str(text), sim.tokenizer.prompt_ids(str(text)))]
        else:
            prompts = [(sim.tokenizer.decode(ids), list(ids))]
        try:
            for _, pids in prompts:
                check_request(sp, len(pids), sim.context_len)
                if lp is not None and lp.start > len(pids):
                    raise ApiError(f"req.logprob_start_len={lp.start} is higher than the number of input "
                                   f"tokens len(req.origin_input_ids)={len(pids)}. Please use a smaller "
                                   "logprob_start_len.")
        except ApiError as e:
            return self.send_json(e.status, e.native_body())
        if isinstance(text, list):
            reqs = [submit(p, pids, q, i) for i, (p, pids) in enumerate(prompts)]
            self.wait_all(reqs)
            return self.send_json(200, [self._out(r, started) for r in reqs])
        prompt, pids = prompts[0]
        reqs = [submit(prompt, pids, q, i) for i in range(sp.n)]
        if body.get("stream"):
            self.start_stream()
            try:
                for kind, r in self.events(q, len(reqs)):
                    if kind == "tokens" and r.finish_reason is None:
                        self.sse(self._out(r, started, final=False))
                    elif kind != "tokens":
                        self.sse(self._out(r, started))  # the final chunk, once
                self.sse("[DONE]")
            except (BrokenPipeError, ConnectionResetError):
                for r in reqs:
                    eng.cancel(r)
            return
        self.wait_all(reqs)
        if len(reqs) > 1:
            return self.send_json(200, [self._out(r, started) for r in reqs])
        return self.send_json(200, self._out(reqs[0], started))


def _logprob_options(body: dict[str, Any]) -> NativeLogprobs | None:
    """/generate's return_logprob, top_logprobs_num, return_text_in_logprobs, logprob_start_len."""
    if not body.get("return_logprob"):
        return None
    opts = NativeLogprobs()
    for key, attr in (("top_logprobs_num", "top"), ("logprob_start_len", "start")):
        v = body.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise schema_error(key, "Input should be a valid integer", v, "int_type")
        setattr(opts, attr, v)
    opts.with_text = bool(body.get("return_text_in_logprobs"))
    return opts


def _hist(h: dict[int, int], steps: int) -> list[int]:
    return [h.get(i, 0) for i in range(steps + 1)]
