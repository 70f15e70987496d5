"""Prometheus metrics of the simulated server, named and labelled as SGLang's."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# SGLang's multiprocess exposition has no *_created series; neither does the simulator.
disable_created_metrics()


# --------------------------------------------------------------------------------------
class Metrics:
    def __init__(self, model_name: str, flavor, spec_on: bool) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        sched = ["model_name", "engine_type"] + (["tp_rank", "pp_rank"] if flavor.rank_labels else [])
        self.sched_labels = {"model_name": model_name, "engine_type": "unified"}
        if flavor.rank_labels:
            self.sched_labels.update(tp_rank="0", pp_rank="0")
        tok = {"model_name": model_name}

        def g(name, doc):
            return Gauge(f"sglang:{name}", doc, sched, registry=r).labels(**self.sched_labels)

        self.num_running_reqs = g("num_running_reqs", "The number of running requests.")
        self.num_used_tokens = g("num_used_tokens", "The number of used tokens.")
        self.token_usage = g("token_usage", "The token usage.")
        self.gen_throughput = g("gen_throughput", "The generation throughput (token/s).")
        self.num_queue_reqs = g("num_queue_reqs", "The number of requests in the waiting queue.")
        self.cache_hit_rate = g("cache_hit_rate", "The prefix cache hit rate.")
        self.spec_accept_length = g("spec_accept_length",
                                    "The average acceptance length of speculative decoding.")
        self.spec_accept_rate = None
        if flavor.has_accept_rate:
            doc = ("The average acceptance rate of speculative decoding (accepted drafts / proposed drafts)."
                   if flavor.strict_accept_rate else
                   "The average acceptance rate of speculative decoding (accepted tokens / total draft tokens in batch).")
            self.spec_accept_rate = g("spec_accept_rate", doc)
        self.is_cuda_graph = g("is_cuda_graph", "Whether the batch is using CUDA graph.") if flavor.rank_labels else None
        self.spec_verify_calls = None
        if flavor.strict_accept_rate and spec_on:
            self.spec_verify_calls = Counter("sglang:spec_verify_calls", "Number of speculative decoding verification calls.",
                                             sched, registry=r).labels(**self.sched_labels)
        tl = ["model_name"]
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", tl, registry=r).labels(**tok)
        self.generation_tokens = Counter("sglang:generation_tokens", "Number of generation tokens processed.", tl, registry=r).labels(**tok)
        self.cached_tokens = Counter("sglang:cached_tokens", "Number of cached prompt tokens.", tl, registry=r).labels(**tok)
        self.num_requests = Counter("sglang:num_requests", "Number of requests processed.", tl, registry=r).labels(**tok)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", tl,
                              buckets=(0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 120, 160),
                              registry=r).labels(**tok)
        self.itl = Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", tl,
                             buckets=(0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04,
                                      0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0),
                             registry=r).labels(**tok)
        self.e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", tl,
                             buckets=(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800),
                             registry=r).labels(**tok)
