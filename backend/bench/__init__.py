"""Benchmarks: results (run here or imported), their store, and the break-even model.

The same inner shape as every domain (``backend/sglang``, ``backend/regen``, ``backend/train``):

* config: the value types (:mod:`specdeck_types.bench`, below both ``backend/`` and ``state/``);
* the parsers: the importers (pure ``text -> results``, one module per family of formats) and
  :mod:`~backend.bench.records` (errors, import outcome), :mod:`~backend.bench.intake`;
* the client: :mod:`~backend.bench.client` (a load against an OpenAI-compatible API);
* the figures: :mod:`~backend.bench.breakeven` (the cost model), :mod:`~backend.bench.baseline`,
  :mod:`~backend.bench.sweep_check`, :mod:`~backend.bench.describe`.

A benchmark run against a managed server and a sweep cross into SGLang's domain: they are
:mod:`backend.flows.bench_job`, :mod:`backend.flows.bench_runner` and :mod:`backend.flows.sweep`.
"""

from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult, Percentiles

__all__ = ["BenchConfig", "BenchFigures", "BenchLoad", "BenchResult", "Percentiles"]
