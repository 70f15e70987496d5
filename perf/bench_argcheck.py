"""Benchmark: what checking a launch command costs preflight.

    python perf/bench_argcheck.py [--python .venv-serve/bin/python] [--cold 3] [--cached 2000]

Prints, for one EAGLE3 config with ``--tp 2`` in its extra arguments:

* SGLang's own parser on a new argv each time (nothing cached), the median of ``--cold``
  runs of each, interleaved: with a parser process started for the check (import sglang,
  then ``prepare_server_args`` on the whole argv, the typed argv and each extra group),
  and in the warm parser (a fork of a process that imported sglang already);
* the same call again with the same argv (the per-process cache), mean of ``--cached``;
* the flag-table emulation of the same check (no sglang), mean of ``--cached``;
* a whole ``run_preflight`` (cached parser answer), mean.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backend.sglang import argcheck, argworker  # noqa: E402
from backend.sglang.config import ServerConfig  # noqa: E402
from backend.sglang.preflight import run_preflight  # noqa: E402
from backend.sglang.version import capabilities, detect_version  # noqa: E402
from backend.sim.models import make_draft_dir, make_target_dir  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=str(REPO / ".venv-serve" / "bin" / "python"))
    ap.add_argument("--cold", type=int, default=3)
    ap.add_argument("--cached", type=int, default=2000)
    a = ap.parse_args()
    version = detect_version(a.python)
    if version is None:
        print(f"no sglang for {a.python}: build the serving environment (scripts/test does) or pass --python")
        return 1
    root = Path(tempfile.mkdtemp(prefix="bench-argcheck-"))
    target = make_target_dir(root / "target", hidden_size=4096, num_hidden_layers=32, vocab_size=128256)
    draft = make_draft_dir(root / "draft", target_hidden_size=4096, vocab_size=128256, draft_vocab_size=32000)

    def cfg(python: str, port: int) -> ServerConfig:
        return ServerConfig.model_validate({
            "name": "bench", "model_path": str(target), "python": python, "port": port, "sglang_version": version,
            "speculative": {"algorithm": "EAGLE3", "draft_model_path": str(draft), "num_steps": 3,
                            "eagle_topk": 1, "num_draft_tokens": 4},
            "extra_args": ["--tp", "2"]})

    caps = capabilities(version)
    print(f"sglang {version} in {a.python}; argv check of an EAGLE3 config with extra_args --tp 2")
    cold, warm = [], []
    for i in range(a.cold):
        for started, out in ((True, cold), (False, warm)):
            c = cfg(a.python, 31000 + 2 * i + (0 if started else 1))  # a new argv: not in the cache
            if started:
                argworker.close_all()  # no warm parser: this check starts one
            t0 = time.perf_counter()
            check = argcheck.check_argv(c, caps)
            out.append(time.perf_counter() - t0)
            assert check.checker == "sglang" and check.overrides, check
    print(f"  SGLang's own parser, new argv, parser process started for it: median {statistics.median(cold):.2f} s "
          f"(runs: {', '.join(f'{x:.2f}' for x in cold)})")
    print(f"  SGLang's own parser, new argv, warm parser: median {statistics.median(warm) * 1e3:.0f} ms "
          f"(runs: {', '.join(f'{x * 1e3:.0f}' for x in warm)}); "
          f"{statistics.median(cold) / statistics.median(warm):.0f}x faster")
    c = cfg(a.python, 31000)
    t0 = time.perf_counter()
    for _ in range(a.cached):
        argcheck.check_argv(c, caps)
    cached = (time.perf_counter() - t0) / a.cached
    print(f"  SGLang's own parser, cached (same argv): {cached * 1e6:.0f} us per check ({a.cached} checks)")
    e = cfg(sys.executable, 31000)
    argcheck.check_argv(e, caps)
    t0 = time.perf_counter()
    for _ in range(a.cached):
        argcheck.check_argv(e, caps)
    emu = (time.perf_counter() - t0) / a.cached
    print(f"  flag-table emulation (no sglang): {emu * 1e3:.2f} ms per check ({a.cached} checks)")
    n = max(1, a.cached // 20)
    t0 = time.perf_counter()
    for _ in range(n):
        run_preflight(c, gpu_probe=lambda: None, port_probe=lambda h, p: True)
    whole = (time.perf_counter() - t0) / n
    print(f"  whole run_preflight with the cached parser answer: {whole * 1e3:.1f} ms ({n} runs)")
    print(f"  ratio cold / cached: {statistics.median(cold) / cached:,.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
