"""Benchmarks: results (run here or imported), their store, and the break-even model.

Same inner shape as ``backend/sglang``: ``records`` (errors, import outcome),
the importers (pure ``text -> results`` parsers, one module per family of
formats), ``breakeven`` (the cost model), ``demo_history`` (the demo
workspace's history), and the CLI commands in ``backend/cli/bench.py``.
The value type itself lives in :mod:`specdeck_types.bench`, below both
``backend/`` and ``state/``.
"""

from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult, Percentiles

__all__ = ["BenchConfig", "BenchFigures", "BenchLoad", "BenchResult", "Percentiles"]
