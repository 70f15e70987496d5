"""``bench import`` and ``bench list`` through the command line's own entry."""

from __future__ import annotations

import io
import json

from backend.cli import main


def _run(capsys, *argv):
    out = io.StringIO()
    rc = main(list(argv), out, io.StringIO())
    return rc, out.getvalue(), capsys.readouterr().err


def test_import_json_lines_dedupe_and_list_filters(tmp_path, fixture_path, capsys):
    ws = str(tmp_path / "ws")
    assert main(["init", ws], io.StringIO()) == 0  # the demo workspace (with its 4 history results)
    rc, out, err = _run(capsys, "-w", ws, "bench", "import", "--json", "--server", "glm5-lab",
                        str(fixture_path("bench_serving_0.5.4.jsonl")), str(fixture_path("nohup_bench_serving_0.5.23.out")))
    assert rc == 0 and err == ""
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["source"], r["source_line"], r["new"]) for r in rows] == [
        ("import:bench_serving_jsonl", 1, True), ("import:bench_serving_report", 12, True),
        ("import:bench_serving_report", 61, True)]
    assert rows[0]["load"]["request_rate"] == "inf"  # JSON-safe, not a bare Infinity
    assert rows[0]["server"] == "glm5-lab" and rows[0]["results"]["output_tok_s"] == 664.25
    assert "raw" not in rows[0]

    rc, out, _ = _run(capsys, "-w", ws, "bench", "import", "--json", str(fixture_path("bench_serving_0.5.4.jsonl")))
    assert rc == 0 and [json.loads(x)["new"] for x in out.splitlines()] == [False]

    rc, out, _ = _run(capsys, "-w", ws, "bench", "list", "--json")
    assert rc == 0 and len(out.splitlines()) == 4 + 3
    rc, out, _ = _run(capsys, "-w", ws, "bench", "list", "--server", "glm5-lab", "--concurrency", "16")
    assert rc == 0 and len(out.splitlines()) == 1
    assert "809.9 tok/s" in out and "concurrency 16" in out and "glm5-lab" in out
    rc, out, _ = _run(capsys, "-w", ws, "bench", "list", "--server", "glm5")
    assert "82.3 tok/s · accept_len 2.10" in out and "no speculation" in out


def test_import_reports_bad_files_and_lines_and_keeps_the_rest(tmp_path, fixture_path, capsys):
    ws = str(tmp_path / "ws")
    main(["init", ws], io.StringIO())
    bad = fixture_path("not_a_benchmark.jsonl")
    rc, out, err = _run(capsys, "-w", ws, "bench", "import", str(bad), str(fixture_path("manual.csv")))
    assert rc == 1
    assert f"error: {bad}:1: a JSON record with none of the keys" in err
    assert f"skipped: {fixture_path('manual.csv')}:6: cuda_graph:" in err
    assert len(out.splitlines()) == 3 and "(new)" in out
    rc, out, _ = _run(capsys, "-w", ws, "bench", "list", "--source", "import:csv")
    assert len(out.splitlines()) == 4 + 3  # the demo history is a CSV import too


def test_import_needs_a_file(tmp_path, capsys):
    out, err = io.StringIO(), io.StringIO()
    assert main(["-w", str(tmp_path), "bench", "import"], out, err) == 2
    assert "at least one FILE" in err.getvalue()


def test_delete_by_id_is_audited_and_an_unknown_id_deletes_nothing(tmp_path, capsys):
    from state import audit
    from state.bench import BenchStore
    from state.store import Store

    ws = str(tmp_path / "ws")
    assert main(["init", ws], io.StringIO()) == 0  # the demo's 4 history results
    rc, out, _ = _run(capsys, "-w", ws, "bench", "list", "--json")
    ids = [json.loads(line)["id"] for line in out.splitlines()]
    assert len(ids) == 4
    rc, out, err = _run(capsys, "-w", ws, "bench", "delete", str(ids[0]), "999999")
    assert rc == 1 and out == "" and "no benchmark result #999999" in err and "nothing deleted" in err
    rc, out, err = _run(capsys, "-w", ws, "bench", "delete", str(ids[0]), str(ids[1]))
    assert rc == 0 and err == "" and out.count("deleted #") == 2
    assert out.startswith(f"deleted #{ids[0]}: ") and "tok/s" in out
    with Store(tmp_path / "ws" / "state.db") as store:
        assert sorted(r.id for r in BenchStore(store).list()) == sorted(ids[2:])
        (entry,) = [e for e in audit.recent(store, 50) if e.action == "delete"]
    assert entry.source == "cli" and entry.detail == f"deleted #{ids[0]}, #{ids[1]}"
