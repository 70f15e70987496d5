"""A benchmark result in one line of text: what ``bench list`` prints, and the Benchmarks page's
name for a result."""

from __future__ import annotations

import math
import time

from specdeck_types.bench import BenchResult


def _f(v: float | None, digits: int) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or (isinstance(v, float) and math.isnan(v)):
        return "N/A"
    return "inf" if math.isinf(v) else f"{v:.{digits}f}"


def describe(r: BenchResult) -> str:
    """One line: where it came from, the configuration, the load, the figures."""
    cfg, load, res = r.config, r.load, r.results
    if r.is_baseline:
        spec = "no speculation"
    elif cfg.algorithm:
        parts = [cfg.algorithm]
        if cfg.draft_model:
            parts.append(cfg.draft_model)
        if cfg.num_draft_tokens:
            parts.append(f"{cfg.num_draft_tokens} draft tokens")
        spec = " ".join(parts)
    else:
        spec = "speculation not recorded"
    lens = f"{load.input_len or '?'}/{load.output_len or '?'} tok" if (load.input_len or load.output_len) else ""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at)) if r.started_at else ""
    acc = _f(r.results.accept_len, 2)
    if res.accept_len is None and res.accept_len_lifetime is not None:
        acc = f"{_f(res.accept_len_lifetime, 2)} (server lifetime)"
    fields = [
        f"#{r.id}" if r.id is not None else "",
        when,
        r.server or "",
        cfg.target_model or "",
        spec,
        f"concurrency {load.concurrency}" if load.concurrency is not None else "concurrency N/A",
        lens,
        f"{_f(res.output_tok_s, 1)} tok/s",
        f"accept_len {acc}",
        r.label or "",
        f"by {r.tool_name}" if r.imported and r.tool_name else ("tool not known" if r.imported else ""),
    ]
    return " · ".join(x for x in fields if x)
