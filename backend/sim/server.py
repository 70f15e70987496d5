"""Simulated SGLang server: ``python -m backend.sim.server [launch_server flags]``.

It stands in for ``python -m sglang.launch_server`` on machines without a GPU: it takes the
same flags, prints the same startup, batch and access lines in a chosen version's format
and serves the same HTTP endpoints, with realistic timing. See backend/sim/engine.py for
the speed and acceptance model.

Environment (simulator settings only):
  SPECDECK_SIM_VERSION (or SPECDECK_SIM_SGLANG_VERSION)  version to imitate, default 0.5.23
  SPECDECK_SIM_SEED           random seed (default 0, or --random-seed)
  SPECDECK_SIM_SPEED          startup time scale: 1 = about 20 s of startup, 50 = 0.4 s
  SPECDECK_SIM_BASELINE_TOK_S single-stream decode speed without speculation (default 90)
  SPECDECK_SIM_PEAK_TOK_S     aggregate decode ceiling (default 860; ~830 at 256 streams)
  SPECDECK_SIM_ACCEPT_LEN     mean accept length of a working draft (overrides ACCEPT_P)
  SPECDECK_SIM_ACCEPT_P       per-draft-token acceptance probability (default 0.55)
  SPECDECK_SIM_FAIL           oom | cuda-oom | cuda-graph | warmup | scheduler
  SPECDECK_SIM_TRAFFIC        1 = built-in background traffic; N > 1 = N concurrent streams
  SPECDECK_SIM_GPU_MEM_GB     memory of one simulated GPU (default 79.19)
Also honoured as SGLang does: SGLANG_LOG_MS (0.5.10+), SGLANG_LOG_FORWARD_ITERS (0.5.5+).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from backend.sim import args as simargs
from backend.sim.engine import (DEFAULT_ACCEPT_P, MTP_ARCHS, DraftInfo, Engine, ModelInfo,
                                Request, SpecPlan, Speed, count_tokens, p_for_accept_len)
from backend.sim.logfmt import Flavor
from backend.sim.output import Output

GIB = float(1 << 30)
WARMUP_PROMPT = "The capital city of France is"
LLAMA_LIKE = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")


class StartupFailed(Exception):
    pass


class Stopped(Exception):
    pass


def _env_float(env: dict[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name, "") or default)
    except ValueError:
        return default


# --------------------------------------------------------------------------------------
# Settings derived from flags, env and the model directories
# --------------------------------------------------------------------------------------
class Sim:
    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.argv = argv
        self.env = env
        version = env.get("SPECDECK_SIM_VERSION") or env.get("SPECDECK_SIM_SGLANG_VERSION") or None
        self.flavor = Flavor.of(version, env)
        self.ns, self.unknown = simargs.parse(argv)
        ns = self.ns
        self.out = Output(self.flavor, tp_size=ns.tp_size, log_level=ns.log_level,
                          log_level_http=ns.log_level_http)
        self.seed = int(env.get("SPECDECK_SIM_SEED") or (ns.random_seed if ns.random_seed is not None else 0))
        self.speed_scale = max(1e-3, _env_float(env, "SPECDECK_SIM_SPEED", 1.0))
        self.fail = (env.get("SPECDECK_SIM_FAIL") or "").strip().lower()
        self.gpu_mem = _env_float(env, "SPECDECK_SIM_GPU_MEM_GB", 79.19)
        self.rng = random.Random(self.seed)
        self.warnings: list[str] = []
        self.model = ModelInfo.read(ns.model_path)
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

    # -- startup ----------------------------------------------------------------------
    def fail_here(self, point: str, msg_lines: list[str], exc_line: str, extra: list[str] | None = None) -> None:
        out = self.out
        for r in range(self.ns.tp_size):
            out.rank("Scheduler hit an exception: Traceback (most recent call last):", r, level=40)
            for line in msg_lines:
                out.raw(line, level=40)
            out.raw(exc_line, level=40)
            for line in extra or []:
                out.raw(line, level=40)
            out.raw("", level=40)
        out.main("Received sigquit from a child process. It usually means the child failed.", level=40)
        raise StartupFailed(point)

    def startup(self) -> None:
        out, fl, ns, plan = self.out, self.flavor, self.ns, self.plan
        tp = max(1, ns.tp_size)
        for w in self.warnings:
            out.main(w, level=30)
        out.main(self.server_args_line())

        # torch distributed
        out.ranks("Init torch distributed begin.")
        self.sleep(0.8)
        init_use = 0.45 + 0.05 * (tp > 1)
        out.ranks(f"Init torch distributed ends. mem usage={init_use:.2f} GB")
        avail = self.gpu_mem - init_use

        # target weights
        out.ranks(f"Load weight begin. avail mem={avail:.2f} GB")
        shards = self.model.shards
        out.raw(_tqdm("Loading safetensors checkpoint shards", 0, shards, 0.0))
        per = 6.0 / shards
        for i in range(1, shards + 1):
            self.sleep(per)
            if self.fail == "cuda-oom" and i == max(1, shards // 2):
                self._fail_cuda_oom(avail)
            out.raw(_tqdm("Loading safetensors checkpoint shards", i, shards, per * i))
        weight = self.model.weight_bytes / tp / GIB
        avail -= weight
        load_s = per * shards  # simulated seconds, like the progress lines
        elapsed = f"elapsed={load_s:.2f} s, " if fl.load_elapsed else ""
        out.ranks(f"Load weight end. {elapsed}type={self.model.architecture}, dtype=torch.bfloat16, "
                  f"avail mem={avail:.2f} GB, mem usage={weight:.2f} GB.")

        # KV cache
        layers, kvh, hd = self.model.num_layers, max(1, self.model.num_kv_heads // tp), self.model.head_dim
        cell = layers * kvh * hd * 2 * 2
        rest = avail - self.gpu_mem * (1 - self.mem_fraction)
        if self.fail == "oom":
            self.sleep(0.3)
            self.fail_here("oom", _frames("model_runner"),
                           "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                           f"Current value: self.server_args.mem_fraction_static={self.mem_fraction}")
        if rest <= 0.5:
            rest = max(0.5, self.gpu_mem * 0.05)
        tokens = ns.max_total_tokens or int(rest * GIB * 0.93 // cell)
        tokens = max(4096, tokens)
        self.max_total_tokens = tokens
        k_gb = tokens * layers * kvh * hd * 2 / GIB
        out.ranks("Using KV cache dtype: torch.bfloat16")
        self.sleep(0.5)
        dtype = "dtype: torch.bfloat16, " if fl.kv_dtype_in_alloc else ""
        out.ranks(f"KV Cache is allocated. {dtype}#tokens: {tokens}, K size: {k_gb:.2f} GB, V size: {k_gb:.2f} GB")
        avail -= 2 * k_gb
        out.ranks(f"Memory pool end. avail mem={avail:.2f} GB")
        self.mem_usage = {"weight": round(weight, 2), "kvcache": round(2 * k_gb, 2),
                          "token_capacity": tokens, "graph": 0.0}

        # target CUDA graphs
        if not self.disable_cuda_graph:
            avail = self._capture("target", avail, 5.0)

        # draft worker
        if plan.on and plan.algorithm != "NGRAM":
            avail = self._draft_worker(avail)

        max_running = self.max_running or min(4096, max(1, tokens // 2))
        self.max_running = max_running
        out.rank(f"max_total_num_tokens={tokens}, chunked_prefill_size={self.chunked_prefill}, "
                 f"max_prefill_tokens={ns.max_prefill_tokens}, max_running_requests={max_running}, "
                 f"context_len={self.context_len}, available_gpu_mem={avail:.2f} GB")

        self.engine = Engine(out=out, flavor=fl, speed=self.speed(), max_running=max_running,
                             max_total_tokens=tokens, context_len=self.context_len,
                             decode_log_interval=ns.decode_log_interval,
                             cuda_graph_max_bs=self.cuda_graph_max_bs,
                             disable_cuda_graph=self.disable_cuda_graph,
                             model_name=self.served_name, seed=self.seed,
                             max_prefill_tokens=ns.max_prefill_tokens)
        self.engine.start()

        # HTTP
        out.main(f"INFO:     Started server process [{os.getpid()}]")
        out.main("INFO:     Waiting for application startup.")
        out.main("INFO:     Application startup complete.")
        out.main(f"INFO:     Uvicorn running on http://{ns.host}:{ns.port} (Press CTRL+C to quit)")
        self.http_up = True
        if ns.skip_server_warmup:
            self.ready = True
            out.main("The server is fired up and ready to roll!")
            return
        self.sleep(0.3)
        out.access(self.rng.randint(40000, 60000), "GET", "/model_info" if fl.new_info_paths else "/get_model_info", 200)
        if self.fail == "warmup":
            self.sleep(0.2)
            out.main("Initialization failed. warmup error: Traceback (most recent call last):", level=40)
            for line in _frames("http_server"):
                out.raw(line, level=40)
            out.raw("AssertionError: Warmup request failed", level=40)
            out.raw("", level=40)
            out.raw("RuntimeError: Initialization failed. Please see the error messages above.", level=40)
            raise StartupFailed("warmup")
        if self.fail == "scheduler":
            self.fail_here("scheduler", _frames("scheduler"),
                           "RuntimeError: CUDA error: an illegal memory access was encountered")
        self._draft_runtime_check(at="warmup")
        req = self.engine.submit(WARMUP_PROMPT, max_new_tokens=8, prompt_tokens=7)
        while req.finish_reason is None:
            if self.stop.wait(0.02):
                raise Stopped()
        out.access(self.rng.randint(40000, 60000), "POST", "/generate", 200)
        self.ready = True
        out.main("The server is fired up and ready to roll!")

    def speed(self) -> Speed:
        return Speed(baseline=_env_float(self.env, "SPECDECK_SIM_BASELINE_TOK_S", 90.0),
                     peak=_env_float(self.env, "SPECDECK_SIM_PEAK_TOK_S", 860.0), plan=self.plan)

    def _capture(self, which: str, avail: float, seconds: float) -> float:
        out, fl, plan = self.out, self.flavor, self.plan
        bs_list = _graph_bs(self.cuda_graph_max_bs)
        graph_gb = 0.35 + 0.004 * len(bs_list) * (plan.num_draft_tokens if plan.on else 1)
        if fl.new_graph_wording:
            phase = "verify" if plan.on else "decode"
            ntok = plan.num_draft_tokens if plan.on else 1
            out.ranks(f"Capture target {phase} CUDA graph begin. backend=full, num_tokens_per_req={ntok}, "
                      f"avail mem={avail:.2f} GB")
        else:
            out.ranks(f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB")
            out.ranks(f"Capture cuda graph bs {bs_list}")
        n = len(bs_list)
        marks = sorted({0, n // 4, n // 2, (3 * n) // 4, n})
        prev = 0
        for m in marks:
            if m:
                self.sleep(seconds * (m - prev) / n)
            if self.fail == "cuda-graph" and m >= n // 2:
                self._fail_cuda_graph(avail)
            bs = bs_list[max(0, n - 1 - m)] if m < n else bs_list[0]
            out.raw(_tqdm(f"Capturing batches (bs={bs} avail_mem={avail - graph_gb * m / n:.2f} GB)",
                          m, n, seconds * m / n, bar=True))
            prev = m
        avail -= graph_gb
        self.mem_usage["graph"] = round(graph_gb, 2)
        if fl.new_graph_wording:
            out.ranks(f"Capture target {phase} CUDA graph end. bs={bs_list}, elapsed={seconds:.2f} s, "
                      f"mem usage={graph_gb:.2f} GB, avail mem={avail:.2f} GB.")
        else:
            out.ranks(f"Capture cuda graph end. Time elapsed: {seconds:.2f} s. mem usage={graph_gb:.2f} GB. "
                      f"avail mem={avail:.2f} GB.")
        return avail

    def _draft_worker(self, avail: float) -> float:
        out, plan, ns = self.out, self.plan, self.ns
        tp = max(1, ns.tp_size)
        draft = plan.draft
        if draft is not None and not draft.found:
            self.fail_here("draft", _frames("model_config"),
                           f"OSError: Can't load the configuration of '{draft.path}'. Make sure the path "
                           f"exists and contains a config.json file.")
        if draft is not None:
            # EAGLE-3 served as EAGLE: the target passes its final hidden state, which already
            # has the draft's embedding width, so the draft's fc layer is skipped.
            if draft.is_eagle3 and plan.algorithm == "EAGLE":
                plan.broken = True
            out.ranks(f"Load weight begin. avail mem={avail:.2f} GB")
            out.raw(_tqdm("Loading safetensors checkpoint shards", 0, 1, 0.0))
            self.sleep(1.0)
            dh = draft.target_hidden_size or draft.hidden_size
            if draft.is_eagle3 and draft.fc_in is not None and dh and draft.fc_in != draft.num_aux * dh:
                self.fail_here("draft-weights", _frames("llama_eagle3"),
                               f"AssertionError: Attempted to load weight (torch.Size([{draft.hidden_size}, "
                               f"{draft.fc_in}])) into parameter (torch.Size([{draft.hidden_size}, "
                               f"{draft.num_aux * dh}]))")
            out.raw(_tqdm("Loading safetensors checkpoint shards", 1, 1, 1.0))
            w = draft.weight_bytes / tp / GIB
            avail -= w
            out.ranks(f"Load weight end. {'elapsed=1.00 s, ' if self.flavor.load_elapsed else ''}"
                      f"type={draft.architecture or 'LlamaForCausalLMEagle3'}, dtype=torch.bfloat16, "
                      f"avail mem={avail:.2f} GB, mem usage={w:.2f} GB.")
        if not self.disable_cuda_graph:
            self._draft_runtime_check(at="graph")
            gb = 0.25
            out.ranks(f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB")
            self.sleep(2.5)
            avail -= gb
            out.ranks(f"Capture draft cuda graph end. Time elapsed: {2.5:.2f} s. mem usage={gb:.2f} GB. "
                      f"avail mem={avail:.2f} GB.")
            out.ranks(f"Capture draft extend cuda graph begin. This can take up to several minutes. "
                      f"avail mem={avail:.2f} GB")
            self.sleep(1.0)
            avail -= 0.1
            out.ranks(f"Capture draft extend cuda graph end. Time elapsed: {1.0:.2f} s. mem usage=0.10 GB. "
                      f"avail mem={avail:.2f} GB.")
        return avail

    def _draft_runtime_check(self, at: str) -> None:
        """The first draft forward fails when the hidden width the target passes does not fit."""
        plan = self.plan
        draft = plan.draft
        if draft is None or not draft.found or getattr(self, "_checked", False):
            return
        self._checked = True
        target_h = self.model.hidden_size
        if plan.algorithm == "EAGLE3":
            width = 3 * target_h
            if draft.is_eagle3:
                need = draft.fc_in
            else:  # EAGLE-1/2 draft concatenates its embedding with the hidden state
                need = draft.fc_in
                width = draft.hidden_size + width
        else:
            width = target_h
            if draft.is_eagle3:
                if width == draft.hidden_size:
                    return  # fc skipped: runs, accepts nothing
                need = draft.fc_in
            else:
                width = draft.hidden_size + target_h
                need = draft.fc_in
        if need is None or need == width:
            return
        where = "cuda_graph_runner" if at == "graph" else ("eagle_worker" if draft.is_eagle3 else "eagle_worker_v1")
        self.fail_here("draft-shape", _frames(where),
                       f"RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x{width} and "
                       f"{need}x{draft.hidden_size})")

    def _fail_cuda_oom(self, avail: float) -> None:
        self.fail_here("cuda-oom", _frames("weight_utils"),
                       f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a "
                       f"total capacity of {self.gpu_mem:.2f} GiB of which 1.02 GiB is free. Including non-PyTorch "
                       f"memory, this process has {self.gpu_mem - 1.02:.2f} GiB memory in use.")

    def _fail_cuda_graph(self, avail: float) -> None:
        flag = self.flavor.cuda_graph_bs_flag
        self.fail_here("cuda-graph", _frames("cuda_graph_runner"),
                       "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 512.00 MiB. "
                       f"GPU 0 has a total capacity of {self.gpu_mem:.2f} GiB of which 310.25 MiB is free.",
                       ["Possible solutions:",
                        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
                        f"2. set {flag} to a smaller value (e.g., 16)",
                        "3. disable torch compile by not using --enable-torch-compile",
                        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
                        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose "])


def _graph_bs(max_bs: int) -> list[int]:
    out = [b for b in (1, 2, 4, 8, 12) if b <= max_bs]
    out += list(range(16, max_bs + 1, 8))
    if max_bs not in out:
        out.append(max_bs)
    return out


def _tqdm(desc: str, done: int, total: int, elapsed: float, bar: bool = False) -> str:
    from backend.sim.logfmt import tqdm_line
    return tqdm_line(desc, done, total, elapsed, bar=bar)


def _frames(where: str) -> list[str]:
    base = "/usr/local/lib/python3.11/dist-packages/sglang/srt"
    frames = {
        "model_runner": [("managers/scheduler.py", 2960, "run_scheduler_process"),
                         ("managers/tp_worker.py", 95, "__init__"),
                         ("model_executor/model_runner.py", 1740, "init_memory_pool")],
        "weight_utils": [("managers/scheduler.py", 2960, "run_scheduler_process"),
                         ("model_executor/model_runner.py", 812, "load_model"),
                         ("model_loader/weight_utils.py", 540, "safetensors_weights_iterator")],
        "cuda_graph_runner": [("managers/scheduler.py", 2960, "run_scheduler_process"),
                              ("model_executor/model_runner.py", 2030, "init_device_graphs"),
                              ("model_executor/cuda_graph_runner.py", 410, "__init__")],
        "llama_eagle3": [("managers/scheduler.py", 2960, "run_scheduler_process"),
                         ("speculative/eagle_worker.py", 120, "__init__"),
                         ("models/llama_eagle3.py", 260, "load_weights"),
                         ("model_loader/weight_utils.py", 760, "default_weight_loader")],
        "eagle_worker": [("managers/scheduler.py", 1130, "event_loop_normal"),
                         ("speculative/eagle_worker.py", 410, "forward_batch_generation"),
                         ("models/llama_eagle3.py", 150, "forward")],
        "eagle_worker_v1": [("managers/scheduler.py", 1130, "event_loop_normal"),
                            ("speculative/eagle_worker.py", 410, "forward_batch_generation"),
                            ("models/llama_eagle.py", 110, "forward")],
        "model_config": [("managers/scheduler.py", 2960, "run_scheduler_process"),
                         ("speculative/eagle_worker.py", 90, "__init__"),
                         ("configs/model_config.py", 120, "__init__")],
        "http_server": [("entrypoints/http_server.py", 1400, "_wait_and_warmup")],
        "scheduler": [("managers/scheduler.py", 1130, "event_loop_normal"),
                      ("model_executor/model_runner.py", 2200, "forward")],
    }[where]
    lines = []
    for path, line, fn in frames:
        lines.append(f'  File "{base}/{path}", line {line}, in {fn}')
    return lines


# --------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------
AUTH_EXEMPT = ("/health", "/health_generate", "/metrics", "/ready")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    sim: Sim  # set on the subclass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence default log
        return

    # -- helpers ----------------------------------------------------------------------
    def _access(self, status: int) -> None:
        self.sim.out.access(self.client_address[1], self.command, self.path, status)

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self._access(status)
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

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

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        self._access(200)

    def _sse(self, obj: Any) -> None:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

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
                return self._json(503, {"error": "Server is not ready"})
            if not self._authorized(path):
                return self._json(401, {"error": "Unauthorized"})
            fl = sim.flavor
            if path in ("/health", "/health_generate"):
                ok = sim.ready or (path == "/health" and not fl.health_waits_ready)
                return self._send(200 if ok else 503, b"")
            if path == "/ready" and fl.has_ready_endpoint:
                return self._send(200 if sim.ready else 503, b"")
            if path in ("/get_server_info", "/server_info") and method == "GET":
                if path == "/server_info" and not fl.new_info_paths:
                    return self._json(404, {"detail": "Not Found"})
                if path == "/get_server_info" and fl.new_info_paths:
                    sim.out.main("Endpoint '/get_server_info' is deprecated and will be removed in a future "
                                 "version. Please use '/server_info' instead.", level=30)
                return self._json(200, sim.server_info())
            if path in ("/get_model_info", "/model_info") and method == "GET":
                if path == "/model_info" and not fl.new_info_paths:
                    return self._json(404, {"detail": "Not Found"})
                if path == "/get_model_info" and fl.new_info_paths:
                    sim.out.main("Endpoint '/get_model_info' is deprecated and will be removed in a future "
                                 "version. Please use '/model_info' instead.", level=30)
                return self._json(200, sim.model_info())
            if path == "/v1/models" and method == "GET":
                return self._json(200, {"object": "list", "data": [{
                    "id": sim.served_name, "object": "model", "created": int(sim.start_time),
                    "owned_by": "sglang", "root": sim.served_name, "max_model_len": sim.context_len}]})
            if path == "/metrics" and method == "GET" and sim.ns.enable_metrics and sim.engine:
                return self._send(200, generate_latest(sim.engine.metrics.registry), CONTENT_TYPE_LATEST)
            if path == "/flush_cache" and method in ("GET", "POST"):
                return self._flush_cache()
            if body is None:
                return self._json(400, {"object": "error", "message": "Invalid JSON body", "code": 400})
            if path == "/generate" and method in ("POST", "PUT"):
                return self._generate(body)
            if path == "/v1/chat/completions" and method == "POST":
                return self._openai(body, chat=True)
            if path == "/v1/completions" and method == "POST":
                return self._openai(body, chat=False)
            return self._json(404, {"detail": "Not Found"})
        except (BrokenPipeError, ConnectionResetError):
            return

    def _flush_cache(self) -> None:
        sim = self.sim
        running, waiting = sim.engine.counts() if sim.engine else (0, 0)
        text = ("Cache flushed.\nPlease check backend logs for more details. (When there are running or "
                "waiting requests, the operation will not be performed.)\n")
        if running or waiting:
            sim.out.rank(f"Cache not flushed because there are pending requests. #queue-req: {waiting}, "
                         f"#running-req: {running}", level=30)
            return self._send(400, text.encode(), "text/plain; charset=utf-8")
        sim.out.rank("Cache flushed successfully!")
        return self._send(200, text.encode(), "text/plain; charset=utf-8")

    # -- generation -------------------------------------------------------------------
    def _wait_tokens(self, req: Request):
        """Yield lists of new words until the request ends; stop early on shutdown."""
        while True:
            try:
                kind, payload = req.events.get(timeout=0.2)
            except Exception:
                if self.sim.stop.is_set():
                    return
                continue
            if kind == "tokens":
                yield payload
            else:
                return

    def _meta(self, req: Request, started: float) -> dict[str, Any]:
        fl, plan = self.sim.flavor, self.sim.plan
        if req.finish_reason == "length":
            fr: Any = {"type": "length", "length": req.generated}
        elif req.finish_reason == "stop":
            fr = {"type": "stop", "matched": 128009}
        elif req.finish_reason == "abort":
            fr = {"type": "abort", "message": "Abort before the request finished."}
        else:
            fr = None
        m: dict[str, Any] = {"id": req.rid, "finish_reason": fr, "prompt_tokens": req.prompt_tokens,
                             "weight_version": "default", "completion_tokens": req.generated,
                             "cached_tokens": req.cached_tokens}
        if plan.on and req.finish_reason is not None:
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
                    m["spec_accept_rate"] = req.accepted_drafts / (vc * plan.num_steps) if vc and plan.num_steps else 0.0
        if req.finish_reason is not None:
            m["e2e_latency"] = round(time.monotonic() - started, 6)
        return m

    def _not_ready(self) -> bool:
        if self.sim.engine is None:
            self._json(503, {"error": "Server is not ready"})
            return True
        return False

    def _generate(self, body: dict[str, Any]) -> None:
        if self._not_ready():
            return
        sim = self.sim
        sp = body.get("sampling_params") or {}
        max_new = sp.get("max_new_tokens", 128)
        ignore_eos = bool(sp.get("ignore_eos", False))
        text = body.get("text")
        ids = body.get("input_ids")
        if isinstance(text, list):
            reqs = [sim.engine.submit(str(t), max_new_tokens=max_new, ignore_eos=ignore_eos) for t in text]
            started = time.monotonic()
            for r in reqs:
                for _ in self._wait_tokens(r):
                    pass
            return self._json(200, [{"text": r.text, "meta_info": self._meta(r, started)} for r in reqs])
        if text is None and ids is None:
            return self._json(400, {"error": {"message": "Either text or input_ids should be provided."}})
        prompt = str(text) if text is not None else " ".join(str(i) for i in ids)
        ptoks = None if text is not None else len(ids)
        started = time.monotonic()
        req = sim.engine.submit(prompt, max_new_tokens=max_new, ignore_eos=ignore_eos, prompt_tokens=ptoks)
        if body.get("stream"):
            self._start_stream()
            try:
                for _ in self._wait_tokens(req):
                    self._sse({"text": req.text, "meta_info": self._meta(req, started)})
                self._sse({"text": req.text, "meta_info": self._meta(req, started)})
                self._sse("[DONE]")
            except (BrokenPipeError, ConnectionResetError):
                sim.engine.cancel(req)
            return
        for _ in self._wait_tokens(req):
            pass
        return self._json(200, {"text": req.text, "meta_info": self._meta(req, started)})

    def _openai(self, body: dict[str, Any], chat: bool) -> None:
        if self._not_ready():
            return
        sim = self.sim
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                return self._json(400, {"object": "error", "message": "messages must be a non-empty list",
                                        "type": "BadRequestError", "param": None, "code": 400})
            prompt = "".join(f"<|{m.get('role', 'user')}|>{_content(m.get('content'))}" for m in msgs
                             if isinstance(m, dict))
            ptoks = sum(count_tokens(_content(m.get("content"))) + 4 for m in msgs if isinstance(m, dict)) + 1
        else:
            p = body.get("prompt", "")
            prompt = p if isinstance(p, str) else json.dumps(p)
            ptoks = count_tokens(prompt)
        max_new = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_new is None and not chat:
            max_new = 16
        req = sim.engine.submit(prompt, max_new_tokens=max_new, ignore_eos=bool(body.get("ignore_eos")),
                                prompt_tokens=ptoks)
        model = body.get("model") or sim.served_name
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def usage() -> dict[str, Any]:
            return {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.generated,
                    "completion_tokens": req.generated, "prompt_tokens_details": None, "reasoning_tokens": 0}

        finish = lambda: "length" if req.finish_reason == "length" else (  # noqa: E731
            "abort" if req.finish_reason == "abort" else "stop")
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._start_stream()

            def chunk(choice: dict[str, Any] | None, u: Any = None) -> dict[str, Any]:
                return {"id": req.rid, "object": obj + ".chunk" if chat else obj, "created": created,
                        "model": model, "choices": [choice] if choice else [], "usage": u}
            try:
                if chat:
                    self._sse(chunk({"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "logprobs": None, "finish_reason": None, "matched_stop": None}))
                for words in self._wait_tokens(req):
                    piece = "".join(words)
                    c = ({"index": 0, "delta": {"role": None, "content": piece}, "logprobs": None,
                          "finish_reason": None, "matched_stop": None} if chat else
                         {"index": 0, "text": piece, "logprobs": None, "finish_reason": None, "matched_stop": None})
                    self._sse(chunk(c))
                last = ({"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish(),
                         "matched_stop": 128009 if finish() == "stop" else None} if chat else
                        {"index": 0, "text": "", "logprobs": None, "finish_reason": finish(),
                         "matched_stop": 128009 if finish() == "stop" else None})
                self._sse(chunk(last))
                if include_usage:
                    self._sse(chunk(None, usage()))
                self._sse("[DONE]")
            except (BrokenPipeError, ConnectionResetError):
                sim.engine.cancel(req)
            return
        for _ in self._wait_tokens(req):
            pass
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": req.text, "reasoning_content": None,
                                              "tool_calls": None},
                      "logprobs": None, "finish_reason": finish(),
                      "matched_stop": 128009 if finish() == "stop" else None}
        else:
            choice = {"index": 0, "text": req.text, "logprobs": None, "finish_reason": finish(),
                      "matched_stop": 128009 if finish() == "stop" else None}
        return self._json(200, {"id": req.rid, "object": obj, "created": created, "model": model,
                                "choices": [choice], "usage": usage()})


def _content(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return " ".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
    return ""


def _hist(h: dict[int, int], steps: int) -> list[int]:
    return [h.get(i, 0) for i in range(steps + 1)]


# --------------------------------------------------------------------------------------
# Background traffic for the demo
# --------------------------------------------------------------------------------------
def traffic_loop(sim: Sim, setting: str) -> None:
    rng = random.Random(sim.seed + 7)
    try:
        fixed = int(setting)
    except ValueError:
        fixed = 1
    phases = [(fixed, 3600.0)] if fixed > 1 else [(1, 30.0), (4, 30.0), (16, 30.0), (0, 8.0)]
    inflight: list[Request] = []
    phase_i, phase_end = 0, time.monotonic() + phases[0][1]
    eng = sim.engine
    assert eng is not None
    while not sim.stop.wait(0.05):
        now = time.monotonic()
        if now >= phase_end:
            phase_i = (phase_i + 1) % len(phases)
            phase_end = now + phases[phase_i][1]
        for r in [r for r in inflight if r.finish_reason is not None]:
            inflight.remove(r)
            if r.finish_reason != "abort":
                sim.out.access(rng.randint(40000, 60000), "POST", "/v1/chat/completions", 200)
        want = phases[phase_i][0]
        while len(inflight) < want:
            plen = rng.randint(120, 1800)
            inflight.append(eng.submit(f"traffic prompt {rng.random()}", max_new_tokens=rng.randint(128, 512),
                                       ignore_eos=True, prompt_tokens=plen))


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    version = env.get("SPECDECK_SIM_VERSION") or env.get("SPECDECK_SIM_SGLANG_VERSION")
    flavor = Flavor.of(version, env)
    if flavor.cuda_graph_max_bs_removed and simargs.ambiguous_cuda_graph_flag(argv):
        sys.stderr.write("usage: launch_server.py [-h] [--model-path MODEL_PATH] ...\n"
                         "launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
                         "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill\n")
        sys.stderr.flush()
        return 2
    try:
        sim = Sim(argv, env)
    except StartupFailed as e:
        sys.stderr.write(f"{e}\n")
        return 1
    if sim.unknown:
        sim.out.main(f"WARNING: the simulated server ignores unrecognized arguments: {' '.join(sim.unknown)}",
                     level=30)

    handler = type("SimHandler", (Handler,), {"sim": sim})
    try:
        httpd = ThreadingHTTPServer((sim.ns.host, sim.ns.port), handler)
    except OSError as e:
        sim.out.main(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address "
                     f"('{sim.ns.host}', {sim.ns.port}): {e.strerror.lower() if e.strerror else e}", level=40)
        return 1
    httpd.daemon_threads = True
    serve = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                             name="sim-http", daemon=True)
    serve.start()

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

    rc = 0
    traffic: threading.Thread | None = None
    try:
        sim.startup()
        setting = (env.get("SPECDECK_SIM_TRAFFIC") or "").strip().lower()
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


if __name__ == "__main__":
    sys.exit(main())
