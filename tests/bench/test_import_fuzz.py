"""A fixed-seed run of perf/fuzz_bench_import.py: mutated real reports through `bench import`
in process give exit statuses, never tracebacks, and nothing impossible is stored."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "perf" / "fuzz_bench_import.py"


@pytest.mark.slow
def test_mutated_reports_never_raise(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("fuzz_bench_import", SCRIPT)
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    rc = fuzz.run(cases=160, seed=5, keep=str(tmp_path / "fuzz"))
    out = capsys.readouterr().out
    assert "tracebacks: 0" in out and "impossible figures stored: 0" in out, out
    assert rc == 0
