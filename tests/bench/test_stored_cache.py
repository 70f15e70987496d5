"""The pages' shared list of stored results (ui/bench/stored.py): decoded once per change of the table, and
read again after every insert, delete and delete-then-insert, by this connection or another one."""

from __future__ import annotations

from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
from state.bench import BenchStore
from state.store import Store
from ui.bench import stored


def _result(tok_s: float, **kw) -> BenchResult:
    return BenchResult(source="run", server="sim", config=BenchConfig(target_model="T", algorithm="EAGLE3"),
                       load=BenchLoad(concurrency=1), results=BenchFigures(output_tok_s=tok_s), **kw)


def test_decoded_once_then_read_again_on_each_change(tmp_path, monkeypatch):
    with Store(tmp_path / "s.db") as s:
        bench = BenchStore(s)
        for v in (10.0, 20.0, 30.0):
            bench.insert(_result(v))
        decodes = []
        real = BenchStore.list
        monkeypatch.setattr(BenchStore, "list", lambda self, *a, **k: decodes.append(1) or real(self, *a, **k))

        first = stored.results(s)
        assert [r.results.output_tok_s for r in first] == [10.0, 20.0, 30.0]
        assert stored.results(s) == first and len(decodes) == 1  # unchanged: not decoded again
        first.clear()  # a caller's list is its own
        assert len(stored.results(s)) == 3

        bench.insert(_result(40.0))  # stored
        assert [r.results.output_tok_s for r in stored.results(s)] == [10.0, 20.0, 30.0, 40.0]
        newest = max(r.id for r in stored.results(s))
        bench.delete(newest)  # deleted
        assert [r.results.output_tok_s for r in stored.results(s)] == [10.0, 20.0, 30.0]
        bench.insert(_result(50.0))  # and one stored in its place: as many rows as before
        assert [r.results.output_tok_s for r in stored.results(s)] == [10.0, 20.0, 30.0, 50.0]
        assert len(decodes) == 4

        with Store(tmp_path / "s.db") as other:  # another process's connection (the command line's import)
            BenchStore(other).insert(_result(60.0))
        assert [r.results.output_tok_s for r in stored.results(s)][-1] == 60.0
