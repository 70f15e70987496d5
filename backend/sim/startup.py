"""The simulated server's startup sequence, for :class:`backend.sim.server.Sim`: the
same log lines SGLang prints from torch distributed to "fired up and ready to roll",
with the failures ``SPECDECK_SIM_FAIL`` asks for (out of memory, CUDA graphs, warmup,
scheduler) and the ones a mismatched draft causes (missing config, weight shapes,
hidden width).  A mixin of ``Sim``: it uses its flags, output, plan and clock.
"""

from __future__ import annotations

import os
from typing import Any

from backend.sim.engine import Engine, ModelInfo, SpecPlan
from backend.sim.logfmt import Flavor, graph_bs_list as _graph_bs, tqdm_line, traceback_frames as _frames
from backend.sim.output import Output

GIB = float(1 << 30)
WARMUP_PROMPT = "The capital city of France is"


class StartupFailed(Exception):
    pass


class Stopped(Exception):
    pass


class StartupMixin:
    """Startup, CUDA-graph capture, the draft worker and the startup failures."""

    ns: Any
    out: Output
    flavor: Flavor
    plan: SpecPlan
    model: ModelInfo
    fail: str
    gpu_mem: float
    env: dict[str, str]
    stop: Any

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

    def hold_while_asked(self) -> None:
        """Loading goes no further while the file SPECDECK_SIM_HOLD names exists: a server that
        stays in its loading phase exactly as long as a test needs, at any SPECDECK_SIM_SPEED."""
        hold = (self.env.get("SPECDECK_SIM_HOLD") or "").strip()
        if not hold:
            return
        while os.path.exists(hold):
            if self.stop.wait(0.05):
                raise Stopped()

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
        out.raw(tqdm_line("Loading safetensors checkpoint shards", 0, shards, 0.0))
        per = 6.0 / shards
        for i in range(1, shards + 1):
            self.sleep(per)
            if i == 1:
                self.hold_while_asked()
            if self.fail == "cuda-oom" and i == max(1, shards // 2):
                self._fail_cuda_oom(avail)
            out.raw(tqdm_line("Loading safetensors checkpoint shards", i, shards, per * i))
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
                             max_prefill_tokens=ns.max_prefill_tokens, tokenizer=self.tokenizer,
                             requests_log=self.env.get("SPECDECK_SIM_REQUESTS_LOG", "").strip() or None)
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
            out.raw(tqdm_line(f"Capturing batches (bs={bs} avail_mem={avail - graph_gb * m / n:.2f} GB)",
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
            out.raw(tqdm_line("Loading safetensors checkpoint shards", 0, 1, 0.0))
            self.sleep(1.0)
            dh = draft.target_hidden_size or draft.hidden_size
            if draft.is_eagle3 and draft.fc_in is not None and dh and draft.fc_in != draft.num_aux * dh:
                self.fail_here("draft-weights", _frames("llama_eagle3"),
                               f"AssertionError: Attempted to load weight (torch.Size([{draft.hidden_size}, "
                               f"{draft.fc_in}])) into parameter (torch.Size([{draft.hidden_size}, "
                               f"{draft.num_aux * dh}]))")
            out.raw(tqdm_line("Loading safetensors checkpoint shards", 1, 1, 1.0))
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
