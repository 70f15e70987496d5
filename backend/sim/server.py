"""Simulated SGLang server: ``python -m backend.sim.server [launch_server flags]``.

It stands in for ``python -m sglang.launch_server`` on machines without a GPU: it takes the
same flags, prints the same startup, batch and access lines in a chosen version's format
and serves the same HTTP endpoints, with realistic timing. See backend/sim/engine.py for
the speed and acceptance model, backend/sim/routes.py and openai_routes.py for the HTTP API,
backend/sim/tokenizer.py for the tokenizer the simulated target counts with, and
backend/sim/startup.py for the startup sequence and its failures.

Environment (simulator settings only):
  SPECDECK_SIM_VERSION (or SPECDECK_SIM_SGLANG_VERSION)  version to imitate, default 0.5.23
  SPECDECK_SIM_SEED           random seed (default 0, or --random-seed)
  SPECDECK_SIM_SPEED          startup time scale: 1 = about 20 s of startup, 50 = 0.4 s
  SPECDECK_SIM_BASELINE_TOK_S single-stream decode speed without speculation (default 90)
  SPECDECK_SIM_PEAK_TOK_S     aggregate decode ceiling (default 860; ~830 at 256 streams)
  SPECDECK_SIM_ACCEPT_LEN     mean accept length of a working draft (overrides ACCEPT_P)
  SPECDECK_SIM_ACCEPT_P       per-draft-token acceptance probability (default 0.55)
  SPECDECK_SIM_ACCEPT_LEN_BY_TEXT  JSON object {"text": accept_len}: a prompt holding the text is
                              drafted at that mean accept length (the first match; others as above)
  SPECDECK_SIM_FAIL           oom | cuda-oom | cuda-graph | warmup | scheduler
  SPECDECK_SIM_TRAFFIC        1 = built-in background traffic; N > 1 = N concurrent streams
  SPECDECK_SIM_GPU_MEM_GB     memory of one simulated GPU (default 79.19)
  SPECDECK_SIM_HOLD           a file path: weight loading holds after its first shard while it exists
  SPECDECK_SIM_REQUESTS_LOG   a file path: each finished request's row (as GET /sim/requests gives it,
                              with this run's id) is appended to it as a JSON line
Also honoured as SGLang does: SGLANG_LOG_MS (0.5.10+), SGLANG_LOG_FORWARD_ITERS (0.5.5+).

:func:`serve` runs the same server in threads of the calling process (it is a
ThreadingHTTPServer), with its environment and output streams given explicitly.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any, TextIO

from backend.sim import args as simargs
from backend.sim.engine import (DEFAULT_ACCEPT_P, MTP_ARCHS, DraftInfo, Engine, ModelInfo, SpecPlan, Speed,
                                p_for_accept_len)
from backend.sim.logfmt import Flavor
from backend.sim.output import Output
from backend.sim.routes import Handler
from backend.sim.startup import StartupFailed, StartupMixin, Stopped
from backend.sim.tokenizer import SimTokenizer
from backend.sim.traffic import traffic_loop

LLAMA_LIKE = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")


def _env_float(env: dict[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name, "") or default)
    except ValueError:
        return default


def accept_len_by_text(raw: str) -> list[tuple[str, float]]:
    """SPECDECK_SIM_ACCEPT_LEN_BY_TEXT: a JSON object of non-empty text -> mean accept length (>= 1)."""
    if not raw.strip():
        return []
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise StartupFailed(f"SPECDECK_SIM_ACCEPT_LEN_BY_TEXT: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise StartupFailed("SPECDECK_SIM_ACCEPT_LEN_BY_TEXT: a JSON object {\"text\": accept_len} is expected")
    out = []
    for text, alen in obj.items():
        if not text or isinstance(alen, bool) or not isinstance(alen, (int, float)) or alen < 1:
            raise StartupFailed(f"SPECDECK_SIM_ACCEPT_LEN_BY_TEXT: {text!r}: a non-empty text and an accept "
                             f"length of at least 1 are expected, got {alen!r}")
        out.append((text, float(alen)))
    return out


# --------------------------------------------------------------------------------------
# Settings derived from flags, env and the model directories
# --------------------------------------------------------------------------------------
class Sim(StartupMixin):
    def __init__(self, argv: list[str], env: dict[str, str], *, out: TextIO | None = None,
                 err: TextIO | None = None) -> None:
        self.argv = argv
        self.env = env
        version = env.get("SPECDECK_SIM_VERSION") or env.get("SPECDECK_SIM_SGLANG_VERSION") or None
        self.flavor = Flavor.of(version, env)
        self.ns, self.unknown = simargs.parse(argv)
        ns = self.ns
        self.out = Output(self.flavor, tp_size=ns.tp_size, log_level=ns.log_level,
                          log_level_http=ns.log_level_http, out=out, err=err)
        self.seed = int(env.get("SPECDECK_SIM_SEED") or (ns.random_seed if ns.random_seed is not None else 0))
        self.speed_scale = max(1e-3, _env_float(env, "SPECDECK_SIM_SPEED", 1.0))
        self.fail = (env.get("SPECDECK_SIM_FAIL") or "").strip().lower()
        self.gpu_mem = _env_float(env, "SPECDECK_SIM_GPU_MEM_GB", 79.19)
        self.rng = random.Random(self.seed)
        self.warnings: list[str] = []
        self.model = ModelInfo.read(ns.model_path)
        self.tokenizer = SimTokenizer.load(ns.tokenizer_path or ns.model_path)
        self.served_name = ns.served_model_name or ns.model_path or "default"
        self.context_len = ns.context_length or self.model.context_len
        self.plan = self._plan()
        self.max_running = ns.max_running_requests
        if self.plan.on and self.max_running is None:
            self.max_running = 48
            if self.flavor.v >= (0, 4, 10):
                self.warnings.append("Max running requests is reset to 48 for speculative decoding. "
                                     "You can override this by explicitly setting --max-running-requests.")
        self.disable_cuda_graph = bool(ns.disable_cuda_graph)
        self.cuda_graph_max_bs = (ns.cuda_graph_max_bs_decode or ns.cuda_graph_max_bs
                                  or (48 if self.plan.on else 256))
        self.mem_fraction = ns.mem_fraction_static if ns.mem_fraction_static is not None else (
            0.85 if self.plan.on else 0.88)
        self.chunked_prefill = ns.chunked_prefill_size or 8192
        self.ready = False
        self.http_up = False
        self.stop = threading.Event()
        self.engine: Engine | None = None
        self.max_total_tokens = 0
        self.mem_usage: dict[str, Any] = {}
        self.start_time = time.time()

    # -- speculative plan -----------------------------------------------------------
    def _plan(self) -> SpecPlan:
        ns, fl = self.ns, self.flavor
        algo = (ns.speculative_algorithm or "").upper() or None
        if algo is None:
            return SpecPlan()
        allowed = simargs.ALGORITHMS_BY_VERSION.get(fl.v[:2], simargs.ALL_ALGORITHMS) \
            if fl.v < (0, 5, 16) else simargs.ALL_ALGORITHMS
        if fl.v < (0, 5, 3):
            allowed = simargs.ALGORITHMS_BY_VERSION[(0, 4)]
        if algo not in allowed:
            choices = ", ".join(repr(a) for a in allowed)
            sys.stderr.write(f"usage: launch_server.py [-h] [--model-path MODEL_PATH] ...\n"
                             f"launch_server.py: error: argument --speculative-algorithm: "
                             f"invalid choice: '{ns.speculative_algorithm}' (choose from {choices})\n")
            raise SystemExit(2)
        if algo == "NEXTN":
            algo = "EAGLE"
        plan = SpecPlan(algorithm=algo)
        steps, topk, ndt = ns.speculative_num_steps, ns.speculative_eagle_topk, ns.speculative_num_draft_tokens
        if algo == "NGRAM":
            ndt = ndt or 12
            steps, topk = ndt - 1, 1
            plan.draft_forwards = 0  # n-gram drafts come from a CPU trie, not a model
        elif steps is None:
            if topk is not None or ndt is not None:
                raise StartupFailed("AssertionError: speculative_eagle_topk and speculative_num_draft_tokens "
                                    "must be None when speculative_num_steps is None")
            arch = self.model.architecture
            if arch in LLAMA_LIKE or fl.v < (0, 4, 10):
                steps, topk, ndt = 5, 4, 8
            elif arch in MTP_ARCHS or algo == "STANDALONE" or fl.v >= (0, 5, 10):
                steps, topk, ndt = 3, 1, 4
            else:
                steps, topk, ndt = 5, 4, 8
        topk = topk or 1
        if ndt is None:
            ndt = steps + 1
        if topk == 1 and ndt != steps + 1:
            self.warnings.append("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                                 "when speculative_eagle_topk == 1")
            ndt = steps + 1
        plan.num_steps, plan.topk, plan.num_draft_tokens = steps, topk, ndt
        if fl.v < (0, 5, 3):
            self.warnings.append("Overlap scheduler is disabled because of using eagle speculative decoding.")
        elif fl.v < (0, 5, 16):
            self.warnings.append("Overlap scheduler is disabled when spec v2 is off or using unsupported "
                                 "speculative algorithm.")
        else:
            self.warnings.append("Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone "
                                 "speculative decoding.")

        if "SPECDECK_SIM_ACCEPT_LEN" in self.env:
            target = _env_float(self.env, "SPECDECK_SIM_ACCEPT_LEN", 2.1)
            p = p_for_accept_len(min(max(1.0, target), steps + 0.999), steps)
        else:
            p = _env_float(self.env, "SPECDECK_SIM_ACCEPT_P", DEFAULT_ACCEPT_P if algo != "NGRAM" else 0.35)
        plan.accept_p = min(0.99, max(0.0, p))
        plan.accept_p_by_text = tuple(
            (text, min(0.99, max(0.0, p_for_accept_len(min(max(1.0, alen), steps + 0.999), steps))))
            for text, alen in accept_len_by_text(self.env.get("SPECDECK_SIM_ACCEPT_LEN_BY_TEXT", "")))

        draft_path = ns.speculative_draft_model_path
        if algo in ("EAGLE", "EAGLE3") and self.model.architecture in MTP_ARCHS and not draft_path:
            draft_path = ns.model_path  # MTP: the target carries its own draft layers
            ns.speculative_draft_model_path = draft_path
        if algo in ("EAGLE", "EAGLE3", "STANDALONE") and draft_path and draft_path != ns.model_path:
            plan.draft = DraftInfo.read(draft_path)
        return plan

    def sleep(self, seconds: float) -> None:
        if self.stop.wait(max(0.0, seconds / self.speed_scale)):
            raise Stopped()

    # -- server_args ---------------------------------------------------------------
    def server_args(self) -> dict[str, Any]:
        ns = self.ns
        plan = self.plan
        d: dict[str, Any] = {
            "model_path": ns.model_path, "tokenizer_path": ns.tokenizer_path or ns.model_path,
            "tokenizer_mode": "auto", "skip_tokenizer_init": bool(ns.skip_tokenizer_init),
            "load_format": ns.load_format, "trust_remote_code": bool(ns.trust_remote_code),
            "dtype": ns.dtype, "kv_cache_dtype": ns.kv_cache_dtype, "quantization": ns.quantization,
            "context_length": ns.context_length, "device": "cuda",
            "served_model_name": self.served_name, "chat_template": ns.chat_template,
            "is_embedding": False, "revision": None, "host": ns.host, "port": ns.port,
            "mem_fraction_static": self.mem_fraction, "max_running_requests": self.max_running,
            "max_total_tokens": ns.max_total_tokens, "chunked_prefill_size": self.chunked_prefill,
            "max_prefill_tokens": ns.max_prefill_tokens, "schedule_policy": ns.schedule_policy,
            "page_size": ns.page_size or 1, "tp_size": ns.tp_size, "pp_size": ns.pp_size,
            "dp_size": ns.dp_size, "ep_size": ns.ep_size, "stream_interval": 1,
            "random_seed": self.seed, "watchdog_timeout": ns.watchdog_timeout,
            "log_level": ns.log_level, "log_level_http": ns.log_level_http,
            "log_requests": bool(ns.log_requests), "show_time_cost": bool(ns.show_time_cost),
            "enable_metrics": bool(ns.enable_metrics), "decode_log_interval": ns.decode_log_interval,
            "api_key": ns.api_key, "attention_backend": ns.attention_backend,
            "speculative_algorithm": plan.algorithm,
            "speculative_draft_model_path": ns.speculative_draft_model_path,
            "speculative_num_steps": plan.num_steps if plan.on else ns.speculative_num_steps,
            "speculative_eagle_topk": plan.topk if plan.on else ns.speculative_eagle_topk,
            "speculative_num_draft_tokens": plan.num_draft_tokens if plan.on else ns.speculative_num_draft_tokens,
            "speculative_accept_threshold_single": ns.speculative_accept_threshold_single,
            "speculative_accept_threshold_acc": ns.speculative_accept_threshold_acc,
            "speculative_token_map": ns.speculative_token_map,
            "disable_cuda_graph": self.disable_cuda_graph,
            "cuda_graph_bs": ns.cuda_graph_bs,
            "disable_radix_cache": bool(ns.disable_radix_cache),
            "enable_dp_attention": bool(ns.enable_dp_attention),
            "enable_torch_compile": bool(ns.enable_torch_compile),
            "disable_overlap_schedule": bool(ns.disable_overlap_schedule) or plan.on,
            "skip_server_warmup": bool(ns.skip_server_warmup),
        }
        if self.flavor.v >= (0, 5, 16):
            d["cuda_graph_max_bs_decode"] = self.cuda_graph_max_bs
        else:
            d["cuda_graph_max_bs"] = self.cuda_graph_max_bs
        if plan.on and self.flavor.v >= (0, 5, 3):
            d["speculative_draft_model_revision"] = ns.speculative_draft_model_revision or (
                "main" if ns.speculative_draft_model_path else None)
        return d

    def server_args_line(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.server_args().items())
        return f"server_args=ServerArgs({inner})"

    def server_info(self) -> dict[str, Any]:
        args = self.server_args()
        state: dict[str, Any] = dict(args)
        eng = self.engine
        state["last_gen_throughput"] = round(eng.last_gen_throughput, 4) if eng else 0.0
        if self.flavor.v >= (0, 5, 4):
            state["memory_usage"] = dict(self.mem_usage)
        if self.flavor.v >= (0, 5, 10):
            state["effective_max_running_requests_per_dp"] = self.max_running
        if self.flavor.v >= (0, 5, 23):
            state["world_size"] = self.ns.tp_size
            state["startup_time"] = self.start_time
        if eng is not None and eng.avg_spec_accept_length is not None:
            state["avg_spec_accept_length"] = eng.avg_spec_accept_length
        info = dict(args)
        info["max_total_num_tokens"] = self.max_total_tokens
        info["max_req_input_len"] = max(1, self.context_len - 1)
        info["internal_states"] = [state]
        info["version"] = self.flavor.version
        return info

    def model_info(self) -> dict[str, Any]:
        d: dict[str, Any] = {"model_path": self.ns.model_path,
                             "tokenizer_path": self.ns.tokenizer_path or self.ns.model_path,
                             "is_generation": True, "preferred_sampling_params": None,
                             "weight_version": "default"}
        if self.flavor.v >= (0, 5, 23):
            d.update(served_model_name=self.served_name, load_format=self.ns.load_format,
                     reasoning_parser=self.ns.reasoning_parser, tool_call_parser=self.ns.tool_call_parser,
                     disaggregation_mode="null", has_image_understanding=False,
                     has_audio_understanding=False, model_type=self.model.model_type,
                     architectures=[self.model.architecture])
        return d

    def speed(self) -> Speed:
        return Speed(baseline=_env_float(self.env, "SPECDECK_SIM_BASELINE_TOK_S", 90.0),
                     peak=_env_float(self.env, "SPECDECK_SIM_PEAK_TOK_S", 860.0), plan=self.plan)

# --------------------------------------------------------------------------------------
# main, and the same server in a thread of this process
# --------------------------------------------------------------------------------------
def _checked_argv(argv: list[str], env: dict[str, str], err: TextIO) -> int | None:
    """2 (with argparse's message on ``err``) where the imitated version would refuse the flags."""
    version = env.get("SPECDECK_SIM_VERSION") or env.get("SPECDECK_SIM_SGLANG_VERSION")
    flavor = Flavor.of(version, env)
    if flavor.cuda_graph_max_bs_removed and simargs.ambiguous_cuda_graph_flag(argv):
        err.write("usage: launch_server.py [-h] [--model-path MODEL_PATH] ...\n"
                  "launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
                  "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill\n")
        err.flush()
        return 2
    return None


class _HTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its open connections, so that a server stopped inside a
    process that goes on (:class:`Served`) drops them as an ended process would."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.open_conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self.open_conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self.open_conns.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        with self._conns_lock:
            conns, self.open_conns = list(self.open_conns), set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


def _bind(sim: Sim) -> _HTTPServer | None:
    """The HTTP server on the simulator's host and port, serving in a daemon thread; None (and
    uvicorn's bind error printed) where the address is taken."""
    if sim.tokenizer.load_error:
        sim.out.main(f"WARNING: cannot use {sim.tokenizer.load_error}; counting tokens with the built-in "
                     "simulated tokenizer", level=30)
    if sim.unknown:
        sim.out.main(f"WARNING: the simulated server ignores unrecognized arguments: {' '.join(sim.unknown)}",
                     level=30)
    handler = type("SimHandler", (Handler,), {"sim": sim})
    try:
        httpd = _HTTPServer((sim.ns.host, sim.ns.port), handler)
    except OSError as e:
        sim.out.main(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address "
                     f"('{sim.ns.host}', {sim.ns.port}): {e.strerror.lower() if e.strerror else e}", level=40)
        return None
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                     name="sim-http", daemon=True).start()
    return httpd


def _run(sim: Sim, httpd: ThreadingHTTPServer) -> int:
    """Startup, then serving until ``sim.stop`` is set, then the shutdown lines; the exit status."""
    rc = 0
    traffic: threading.Thread | None = None
    try:
        sim.startup()
        setting = (sim.env.get("SPECDECK_SIM_TRAFFIC") or "").strip().lower()
        if setting and setting not in ("0", "false", "no", "off"):
            traffic = threading.Thread(target=traffic_loop, args=(sim, setting), name="sim-traffic", daemon=True)
            traffic.start()
        while not sim.stop.wait(0.5):
            pass
    except Stopped:
        pass
    except StartupFailed:
        rc = 1
    sim.stop.set()
    if rc == 0:
        sim.out.main("INFO:     Shutting down")
        sim.out.main("INFO:     Waiting for application shutdown.")
    if sim.engine is not None:
        sim.engine.stop(0.5)
    httpd.shutdown()
    httpd.server_close()
    if traffic is not None:
        traffic.join(0.3)
    if rc == 0:
        sim.out.main("INFO:     Application shutdown complete.")
        sim.out.main(f"INFO:     Finished server process [{os.getpid()}]")
    return rc


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    bad = _checked_argv(argv, env, sys.stderr)
    if bad is not None:
        return bad
    try:
        sim = Sim(argv, env)
    except StartupFailed as e:
        sys.stderr.write(f"{e}\n")
        return 1
    httpd = _bind(sim)
    if httpd is None:
        return 1

    # The handler only writes to a pipe (no Python locks: setting an Event from
    # a handler can deadlock against the main thread waiting on that Event);
    # a relay thread turns the byte into sim.stop.
    wake_r, wake_w = os.pipe()

    def on_signal(signum: int, _frame: Any) -> None:
        try:
            os.write(wake_w, b"\0")
        except OSError:
            pass

    def relay() -> None:
        try:
            os.read(wake_r, 1)
        finally:
            sim.stop.set()

    threading.Thread(target=relay, name="sim-signals", daemon=True).start()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return _run(sim, httpd)


class Served:
    """A simulated server run by :func:`serve` in threads of this process: what ``python -m
    backend.sim.server`` does, without the process (no signal handlers; :meth:`stop` is its SIGTERM)."""

    def __init__(self, sim: Sim, httpd: _HTTPServer) -> None:
        self.sim = sim
        self.port = httpd.server_address[1]
        self.base = f"http://{sim.ns.host}:{self.port}"
        self.returncode: int | None = None
        self._httpd = httpd
        self._thread = threading.Thread(target=self._main, name="sim-main", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        rc = 1
        try:
            rc = _run(self.sim, self._httpd)
        finally:
            self._httpd.drop_connections()
        self.returncode = rc

    def poll(self) -> int | None:
        """The exit status once it has ended (a startup failure, or :meth:`stop`), else None."""
        return self.returncode if not self._thread.is_alive() else None

    def stop(self, timeout: float = 10.0) -> int | None:
        self.sim.stop.set()
        self._thread.join(timeout)
        return self.poll()


def serve(argv: list[str], env: dict[str, str], *, out: TextIO, err: TextIO | None = None) -> Served | int:
    """The simulated server of ``python -m backend.sim.server ARGV`` with only ``env`` as its
    environment, started in threads of this process and writing its lines to ``out`` (and
    ``err``; default ``out``); the exit status instead where it would end before serving (bad
    flags, an address in use)."""
    err = err or out
    env = dict(env)
    bad = _checked_argv(argv, env, err)
    if bad is not None:
        return bad
    try:
        sim = Sim(list(argv), env, out=out, err=err)
    except StartupFailed as e:
        err.write(f"{e}\n")
        return 1
    except SystemExit as e:  # argparse's refusal, as the process would exit
        return e.code if isinstance(e.code, int) else 2
    httpd = _bind(sim)
    if httpd is None:
        return 1
    return Served(sim, httpd)


if __name__ == "__main__":
    sys.exit(main())
