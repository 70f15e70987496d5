"""Log line formats of the SGLang versions the simulator imitates.

Everything here is pure string building, so the formats can be unit-tested without a
process. Facts follow docs in ../shared/reference/sglang.md §1 and §6: the label
(``Decode batch.`` / ``Decode batch [N],`` / ``Decode batch,``), the trailing ``, `` rule,
the meaning of ``accept rate`` and the prefix (rank tag only when TP > 1, milliseconds only
from 0.5.10 with SGLANG_LOG_MS).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

DEFAULT_VERSION = "0.5.23"


def parse_version(text: str) -> tuple[int, int, int]:
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        raise ValueError(f"not a version: {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True)
class Flavor:
    """What one SGLang version prints and serves."""

    version: str
    v: tuple[int, int, int]
    log_ms: bool = False          # SGLANG_LOG_MS=1 (only honoured from 0.5.10)
    forward_iters: bool = False   # SGLANG_LOG_FORWARD_ITERS=1 (0.5.5+)

    @classmethod
    def of(cls, version: str | None, env: dict[str, str] | None = None) -> "Flavor":
        version = version or DEFAULT_VERSION
        v = parse_version(version)
        env = env or {}
        truthy = ("1", "true", "True", "yes")
        return cls(version=version, v=v,
                   log_ms=v >= (0, 5, 10) and env.get("SGLANG_LOG_MS", "") in truthy,
                   forward_iters=env.get("SGLANG_LOG_FORWARD_ITERS", "") in truthy)

    # --- what the version has ------------------------------------------------------------
    @property
    def dot_label(self) -> bool:          # "Decode batch." up to 0.5.3
        return self.v < (0, 5, 4)

    @property
    def always_iter(self) -> bool:        # "Decode batch [N]," in 0.5.4
        return (0, 5, 4) <= self.v < (0, 5, 5)

    @property
    def trailing_comma(self) -> bool:     # ", " after #queue-req from 0.4.10 to 0.5.5
        return (0, 4, 10) <= self.v < (0, 5, 10)

    @property
    def has_accept_rate(self) -> bool:
        return self.v >= (0, 5, 4)

    @property
    def strict_accept_rate(self) -> bool:  # drafts-only rate from 0.5.16
        return self.v >= (0, 5, 16)

    @property
    def prefill_tail(self) -> bool:        # "cuda graph: B, input throughput" on prefill lines
        return self.v >= (0, 5, 10)

    @property
    def pending_token(self) -> bool:
        return self.v >= (0, 5, 16)

    @property
    def new_info_paths(self) -> bool:      # /server_info and /model_info
        return self.v >= (0, 5, 10)

    @property
    def health_waits_ready(self) -> bool:  # /health is 503 while starting
        return self.v >= (0, 4, 10)

    @property
    def has_ready_endpoint(self) -> bool:
        return self.v >= (0, 5, 23)

    @property
    def new_graph_wording(self) -> bool:   # "Capture target decode CUDA graph begin. ..."
        return self.v >= (0, 5, 23)

    @property
    def kv_dtype_in_alloc(self) -> bool:
        return self.v >= (0, 5, 16)

    @property
    def load_elapsed(self) -> bool:
        return self.v >= (0, 5, 23)

    @property
    def rank_labels(self) -> bool:         # tp_rank / pp_rank labels on scheduler gauges
        return self.v >= (0, 5, 4)

    @property
    def cuda_graph_max_bs_removed(self) -> bool:
        return self.v >= (0, 5, 23)

    @property
    def cuda_graph_bs_flag(self) -> str:
        return "--cuda-graph-max-bs-decode" if self.v >= (0, 5, 23) else "--cuda-graph-max-bs"

    # --- lines --------------------------------------------------------------------------
    def prefix(self, tp_rank: int | None = None, tp_size: int = 1, now: float | None = None) -> str:
        now = time.time() if now is None else now
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        if self.log_ms:
            ts += ".%03d" % int((now - int(now)) * 1000)
        if tp_rank is not None and tp_size > 1:
            ts += f" TP{tp_rank}"
        return f"[{ts}] "

    def _label(self, kind: str, forward_ct: int) -> str:
        if self.dot_label:
            return f"{kind} batch. "
        if self.always_iter or (self.forward_iters and self.v >= (0, 5, 5)):
            return f"{kind} batch [{forward_ct}], "
        return f"{kind} batch, "

    def accept_rate(self, accept_len: float, num_steps: int, num_draft_tokens: int) -> float:
        if self.strict_accept_rate:
            per_round = max(1, num_draft_tokens - 1)
            return max(0.0, accept_len - 1.0) / per_round
        if self.v >= (0, 5, 10):
            return accept_len / max(1, num_draft_tokens)
        return accept_len / max(1, num_steps + 1)

    def decode_line(self, *, forward_ct: int, running: int, tokens: int, token_usage: float,
                    accept_len: float | None, accept_rate: float | None, cuda_graph: bool,
                    gen_throughput: float, queue: int) -> str:
        msg = self._label("Decode", forward_ct)
        msg += f"#running-req: {running}, #token: {tokens}, token usage: {token_usage:.2f}, "
        if accept_len is not None:
            msg += f"accept len: {accept_len:.2f}, "
            if self.has_accept_rate and accept_rate is not None:
                msg += f"accept rate: {accept_rate:.2f}, "
        msg += (f"cuda graph: {cuda_graph}, gen throughput (token/s): {gen_throughput:.2f}, "
                f"#queue-req: {queue}")
        if self.trailing_comma:
            msg += ", "
        return msg

    def prefill_line(self, *, forward_ct: int, new_seq: int, new_token: int, cached_token: int,
                     token_usage: float, running: int, queue: int, pending_token: int,
                     cuda_graph: bool, input_throughput: float) -> str:
        msg = self._label("Prefill", forward_ct)
        msg += (f"#new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached_token}, "
                f"token usage: {token_usage:.2f}, #running-req: {running}, #queue-req: {queue}")
        if self.prefill_tail:
            msg += ", "
            if self.pending_token:
                msg += f"#pending-token: {pending_token}, "
            msg += f"cuda graph: {cuda_graph}, input throughput (token/s): {input_throughput:.2f}"
        elif self.trailing_comma:
            msg += ", "
        return msg


def access_line(client_port: int, method: str, path: str, status: int) -> str:
    reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
              405: "Method Not Allowed", 503: "Service Unavailable"}.get(status, "")
    return f'INFO:     127.0.0.1:{client_port} - "{method} {path} HTTP/1.1" {status} {reason}'.rstrip()


def tqdm_line(desc: str, done: int, total: int, elapsed: float, bar: bool = False) -> str:
    """A tqdm-like progress line (``desc:  NN% Completed | a/b [mm:ss<mm:ss, X.XXs/it]``)."""
    pct = 100.0 * done / total if total else 100.0
    el = _mmss(elapsed)
    if done:
        per = elapsed / done
        rem = _mmss(per * (total - done))
        rate = f"{per:5.2f}s/it" if per >= 1 else f"{1.0 / per if per else 0.0:5.2f}it/s"
    else:
        rem, rate = "?", "?it/s"
    if bar:
        filled = int(round(10 * done / total)) if total else 10
        return f"{desc}: {pct:3.0f}%|{'█' * filled}{' ' * (10 - filled)}| {done}/{total} [{el}<{rem}, {rate}]"
    return f"{desc}: {pct:3.0f}% Completed | {done}/{total} [{el}<{rem}, {rate}]"


def _mmss(sec: float) -> str:
    sec = max(0, int(sec))
    return f"{sec // 60:02d}:{sec % 60:02d}"


def graph_bs_list(max_bs: int) -> list[int]:
    out = [b for b in (1, 2, 4, 8, 12) if b <= max_bs]
    out += list(range(16, max_bs + 1, 8))
    if max_bs not in out:
        out.append(max_bs)
    return out


def traceback_frames(where: str) -> list[str]:
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
