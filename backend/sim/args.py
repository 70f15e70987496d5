"""Command-line flags of the simulator: those of ``python -m sglang.launch_server`` that a
launch builder emits, plus common ones it may pass through. Unknown flags are returned to
the caller, which prints a warning and carries on."""

from __future__ import annotations

import argparse

ALGORITHMS_BY_VERSION = {
    (0, 4): ("EAGLE", "EAGLE3", "NEXTN"),
    (0, 5): ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"),
}
ALL_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")


def _bool_flag(p: argparse.ArgumentParser, *names: str) -> None:
    p.add_argument(*names, action="store_true")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch_server.py", allow_abbrev=False,
                                description="Simulated SGLang server (no GPU).")
    a = p.add_argument
    a("--model-path", "--model", dest="model_path", default=None)
    a("--tokenizer-path", default=None)
    a("--served-model-name", default=None)
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--dp-size", "--dp", "--data-parallel-size", dest="dp_size", type=int, default=1)
    a("--ep-size", "--ep", "--expert-parallel-size", dest="ep_size", type=int, default=1)
    a("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1)
    a("--mem-fraction-static", type=float, default=None)
    a("--max-running-requests", type=int, default=None)
    a("--max-total-tokens", type=int, default=None)
    a("--max-prefill-tokens", type=int, default=16384)
    a("--chunked-prefill-size", type=int, default=None)
    a("--context-length", type=int, default=None)
    a("--page-size", type=int, default=None)
    a("--dtype", default="auto")
    a("--kv-cache-dtype", default="auto")
    a("--quantization", default=None)
    a("--load-format", default="auto")
    a("--attention-backend", default=None)
    a("--random-seed", type=int, default=None)
    a("--log-level", default="info")
    a("--log-level-http", default=None)
    a("--api-key", default=None)
    a("--admin-api-key", default=None)
    a("--decode-log-interval", type=int, default=40)
    a("--watchdog-timeout", type=float, default=300)
    a("--schedule-policy", default="fcfs")
    a("--chat-template", default=None)
    a("--reasoning-parser", default=None)
    a("--tool-call-parser", default=None)
    a("--speculative-algorithm", default=None)
    a("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path", default=None)
    a("--speculative-draft-model-revision", default=None)
    a("--speculative-draft-load-format", default=None)
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None)
    a("--speculative-num-draft-tokens", type=int, default=None)
    a("--speculative-accept-threshold-single", type=float, default=1.0)
    a("--speculative-accept-threshold-acc", type=float, default=1.0)
    a("--speculative-token-map", default=None)
    a("--speculative-attention-mode", default="prefill")
    a("--speculative-draft-attention-backend", default=None)
    a("--cuda-graph-max-bs", type=int, default=None)
    a("--cuda-graph-max-bs-decode", type=int, default=None)
    a("--cuda-graph-max-bs-prefill", type=int, default=None)
    a("--cuda-graph-bs", type=int, nargs="+", default=None)
    for name in ("--trust-remote-code", "--disable-cuda-graph", "--enable-metrics",
                 "--enable-metrics-for-all-schedulers", "--skip-server-warmup",
                 "--disable-radix-cache", "--enable-torch-compile", "--enable-dp-attention",
                 "--disable-overlap-schedule", "--enable-mixed-chunk", "--enable-cache-report",
                 "--log-requests", "--show-time-cost", "--skip-tokenizer-init",
                 "--enable-multi-layer-eagle", "--enable-mfu-metrics"):
        _bool_flag(p, name)
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(argv)


def ambiguous_cuda_graph_flag(argv: list[str]) -> bool:
    """True when ``--cuda-graph-max-bs`` is used (ambiguous from 0.5.23)."""
    return any(t == "--cuda-graph-max-bs" or t.startswith("--cuda-graph-max-bs=") for t in argv)
