"""Importing benchmark files that arrive as bytes (the Benchmarks page's Import tab) and deleting stored
results: the intake's naming and dedupe, every kind of bad file, and the page's paste, delete and
read-only paths through AppTest."""

from __future__ import annotations


import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.bench.demo_history import install_demo_history
from backend.bench.intake import MAX_BYTES, source_name, store_files, summary
from state import audit
from state.bench import BenchStore
from state.store import Store
from tests.helpers import close_runtime, open_page



@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "state.db") as s:
        yield BenchStore(s)


def test_an_uploaded_report_is_stored_once_and_named_by_its_name_and_content(store, fixture_path):
    data = fixture_path("nohup_bench_serving_0.5.23.out").read_bytes()
    (o,) = store_files(store, [("nohup.out", data, "uploaded")], server="glm5-lab")
    assert o.error is None and o.skipped == [] and len(o.new) == 2 and o.existing == []
    assert o.formats == ["bench_serving_report"]
    assert o.name == source_name("nohup.out", data) and o.name.startswith("nohup.out (uploaded, sha256 ")
    stored = [store.get(i) for i in o.new]
    assert [(r.source_file, r.source_line, r.server) for r in stored] == [(o.name, 12, "glm5-lab"), (o.name, 61, "glm5-lab")]
    # the same bytes again: already stored, nothing new
    (again,) = store_files(store, [("nohup.out", data, "uploaded")])
    assert again.new == [] and again.existing == o.new
    # another file of the same name is a file of its own
    other = data.replace(b"Output token throughput (tok/s):", b"Output token throughput (tok/s): ", 1)
    (third,) = store_files(store, [("nohup.out", other, "uploaded")])
    assert len(third.new) == 2 and third.name != o.name
    assert store.count() == 4
    assert summary([o, again, third]) == "4 results stored from 3 of 3 file(s), 2 already stored"


def test_a_pasted_report_keeps_the_server_it_names(store, fixture_path):
    text = fixture_path("bench_serving_0.5.4.jsonl").read_bytes()
    (o,) = store_files(store, [("  my   run ", text, "pasted")], server="ignored-when-the-file-says")
    r = store.get(o.new[0])
    assert o.name.startswith("my run (pasted, sha256 ")
    assert r.results.output_tok_s == 664.25


@pytest.mark.parametrize("name, data, words", [
    ("binary.bin", b"Backend: sglang\n\xff\xfe\x00garbage\n", "binary.bin (uploaded, sha256 "),
    ("log.txt", b"just a log line\nanother\n", "not a benchmark result"),
    ("empty.txt", b"", "the file is empty"),
])
def test_a_file_that_is_not_a_benchmark_says_which_file_and_line(store, name, data, words):
    (o,) = store_files(store, [(name, data, "uploaded")])
    assert o.error is not None and words in o.error and o.new == [] and not o.ok
    assert f"{source_name(name, data)}:" in o.error  # file:line
    if name == "binary.bin":
        assert ":2: not a text file (not UTF-8)" in o.error
    assert store.count() == 0


def test_an_oversized_file_is_refused_before_it_is_parsed(store):
    (o,) = store_files(store, [("huge.jsonl", b"x" * (MAX_BYTES + 1), "uploaded")])
    assert o.error is not None and "MiB is more than a benchmark file holds" in o.error


def test_a_bad_line_is_skipped_and_named_and_the_rest_is_stored(store, fixture_path):
    good = fixture_path("bench_serving_0.5.4.jsonl").read_bytes().rstrip(b"\n")
    data = good + b'\n{"output_throughput": "fast", "mean_ttft_ms": 1}\n' + good.replace(b'"output_throughput": 664.25', b'"output_throughput": 700.5') + b"\n"
    (o,) = store_files(store, [("mixed.jsonl", data, "uploaded")])
    assert len(o.new) == 2 and len(o.skipped) == 1 and o.skipped[0].startswith(f"{o.name}:2: ")
    assert sorted(store.get(i).results.output_tok_s for i in o.new) == [664.25, 700.5]
    assert summary([o]) == "2 results stored from 1 of 1 file(s), 1 part skipped"


# -- the page ------------------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "bench-import"\n')
    assert install_demo_history(tmp_path) == 4
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _page(tab: str | None = None) -> AppTest:
    return open_page("app_pages/benchmarks.py", tab=tab)


def _tab(at: AppTest, tab: str) -> None:
    at.session_state["bench-tab"] = tab  # what choosing the tab does (the page runs again)
    at.run()
    assert not at.exception, at.exception


def _button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def test_paste_a_report_import_it_see_it_and_delete_it(workspace, fixture_path):
    rt = runtime_mod.get_runtime()
    bench = BenchStore(rt.store)
    at = _page("Import")
    at.text_area(key="bench-import-text").input(fixture_path("nohup_bench_serving_0.5.23.out").read_text())
    at.text_input(key="bench-import-name").input("nohup.out from node 3")
    at.text_input(key="bench-import-server").input("glm5-lab")
    _button(at, "Import").click()
    at.run()
    assert not at.exception, at.exception
    assert [s.value for s in at.success] == ["2 results stored from 1 of 1 file(s)"]
    assert bench.count() == 6
    new = [r for r in bench.list() if r.server == "glm5-lab"]
    assert len(new) == 2 and all(r.source_file.startswith("nohup.out from node 3 (pasted, sha256 ") for r in new)
    (entry,) = [e for e in audit.recent(rt.store, 20) if e.action == "import"]
    assert entry.actor == "local" and entry.outcome == "ok" and "2 results stored" in entry.detail
    _tab(at, "Runs")
    runs = next(d.value for d in at.dataframe if "output tok/s" in d.value.columns)
    assert len(runs) == 6 and sorted(runs[runs["server"] == "glm5-lab"]["concurrency"]) == [1, 16]

    # the same text again: nothing new, and the page says so
    _tab(at, "Import")
    assert at.text_input(key="bench-import-server").value == "glm5-lab"  # kept while the tab was not built
    at.text_area(key="bench-import-text").input(fixture_path("nohup_bench_serving_0.5.23.out").read_text())
    at.text_input(key="bench-import-name").input("nohup.out from node 3")
    _button(at, "Import").click()
    at.run()
    assert [w.value for w in at.warning] == ["0 results stored from 1 of 1 file(s), 2 already stored"]
    assert bench.count() == 6

    # delete both, after the question
    _tab(at, "Runs")
    ids = sorted(r.id for r in new)
    at.multiselect(key="bench-delete-ids").set_value(ids).run()
    _button(at, "Delete…").click()
    at.run()
    assert any(f"Delete 2 results (#{ids[0]}, #{ids[1]})?" in w.value for w in at.warning)
    assert bench.count() == 6  # nothing until confirmed
    _button(at, "Yes, delete").click()
    at.run()
    assert not at.exception, at.exception
    assert bench.count() == 4 and all(bench.get(i) is None for i in ids)
    (entry,) = [e for e in audit.recent(rt.store, 20) if e.action == "delete"]
    assert entry.detail.startswith(f"#{ids[0]}, #{ids[1]} deleted #{ids[0]}, #{ids[1]}")


def test_upload_two_files_one_stored_and_one_named_as_not_a_benchmark(workspace, fixture_path):
    rt = runtime_mod.get_runtime()
    bench = BenchStore(rt.store)
    at = _page("Import")
    report = fixture_path("nohup_bench_serving_0.5.23.out").read_bytes()
    at.file_uploader(key="bench-import-files").set_value([
        ("nohup.out", report, "application/octet-stream"),
        ("train.log", b"step 1 loss 2.3\nstep 2 loss 2.1\n", "text/plain"),
    ])
    at.text_input(key="bench-import-server").input("glm5-lab")
    _button(at, "Import").click()
    at.run()
    assert not at.exception, at.exception
    assert bench.count() == 6
    new = [r for r in bench.list() if r.server == "glm5-lab"]
    assert len(new) == 2 and all(r.source_file.startswith("nohup.out (uploaded, sha256 ") for r in new)
    assert [w.value for w in at.warning] == ["2 results stored from 1 of 2 file(s), 1 not imported"]
    (err,) = [e.value for e in at.error]
    assert err.startswith("train.log (uploaded, sha256 ") and "not a benchmark result" in err
    table = next(d.value for d in at.dataframe if "stored before" in d.value.columns)
    assert list(table["file"]) == ["nohup.out", "train.log"]
    assert list(table["new"])[1] == "none" and list(table["new"])[0].count("#") == 2
    (entry,) = [e for e in audit.recent(rt.store, 20) if e.action == "import"]
    assert entry.detail.startswith("nohup.out, train.log") and entry.outcome == "error"


def test_cancel_keeps_the_results(workspace):
    rt = runtime_mod.get_runtime()
    bench = BenchStore(rt.store)
    at = _page()
    first = bench.list()[0].id
    at.multiselect(key="bench-delete-ids").set_value([first]).run()
    _button(at, "Delete…").click()
    at.run()
    _button(at, "Cancel").click()
    at.run()
    assert bench.get(first) is not None and bench.count() == 4
    assert not [e for e in audit.recent(rt.store, 20) if e.action == "delete"]


@pytest.fixture
def exposed(monkeypatch):
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    monkeypatch.setattr("ui.auth.peer_address", lambda: "10.213.0.2")
    yield
    st_config.set_option("server.address", before)


def test_read_only_without_a_user_cannot_import_or_delete(workspace, exposed):
    # anonymous browsers see the page only where the workspace opts in; even then they act on nothing
    with open(workspace / "specdeck.toml", "a") as f:
        f.write("\n[access]\nanonymous_view = true\n")
    rt = runtime_mod.get_runtime()
    at = _page("Import")
    assert _button(at, "Import").disabled and "Read-only" in _button(at, "Import").help
    _tab(at, "Runs")
    assert _button(at, "Delete…").disabled
    assert BenchStore(rt.store).count() == 4
