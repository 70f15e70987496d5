"""The output files on their own: paths, torn tails, reading ids back, batches, requeue, validate."""

from __future__ import annotations

import json

import pytest

from backend.regen.output import (OutputError, OutputWriter, RunFiles, encode, error_record, repair_torn_tail,
                                  requeue, scan, skipped_key, skipped_record, success_record, validate)
from backend.regen.progress import last_snapshot


def _ok(rid: str, dataset: str = "d", tokens: int = 7) -> dict:
    return success_record(rid, {"id": 5, "conversations": [], "extra": 1},
                          [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                          {"server": "http://s:1", "prompt_tokens": 3, "completion_tokens": tokens,
                           "finish_reason": "stop", "dataset": dataset, "t": 1.0, "retries": 0})


def test_file_names_follow_specforge_and_the_spec(tmp_path):
    f = RunFiles.of(tmp_path / "code-mix.jsonl")
    assert (f.error.name, f.skipped.name, f.progress.name, f.job.name, f.control.name) == (
        "code-mix_error.jsonl", "code-mix_skipped.jsonl", "code-mix.progress.jsonl", "code-mix.job.json",
        "code-mix.control")
    with pytest.raises(OutputError, match="must be a .jsonl file"):
        RunFiles.of(tmp_path / "code-mix.json")


def test_records_put_id_status_regen_first_and_keep_the_input_keys():
    rec = _ok("r1")
    assert list(rec)[:3] == ["id", "status", "regen"] and rec["extra"] == 1 and rec["id"] == "r1"
    assert encode(rec).startswith(b'{"id": "r1", "status": "success", "regen": {"server"')
    err = error_record("r2", {"id": "r2", "conversations": [1]}, "HTTP 400: too long", {"class": "context_length"})
    assert (err["status"], err["error"], err["conversations"]) == ("error", "HTTP 400: too long", [1])
    sk = skipped_record(None, "{broken", "in.jsonl:3: not valid JSON", "d", 3)
    assert sk == {"status": "skipped", "regen": {"dataset": "d", "line": 3}, "raw": "{broken",
                  "error": "in.jsonl:3: not valid JSON", "reason": "in.jsonl:3: not valid JSON"}


def test_repair_cuts_only_a_torn_tail(tmp_path):
    p = tmp_path / "o.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    assert repair_torn_tail(p) == 0 and p.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    p.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    assert repair_torn_tail(p) == 6 and p.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    p.write_bytes(b'{"only": "torn')
    assert repair_torn_tail(p) == 14 and p.read_bytes() == b""
    assert repair_torn_tail(tmp_path / "missing.jsonl") == 0


def test_scan_reads_ids_from_line_heads_and_from_other_shapes(tmp_path):
    f = RunFiles.of(tmp_path / "o.jsonl")
    other = {"conversations": [{"role": "user", "content": "x"}], "status": "success", "id": "by-hand",
             "regen": {"dataset": "d2", "completion_tokens": 4}}
    f.out.write_bytes(encode(_ok("r1")) + encode(_ok('q"uote\\d')) + (json.dumps(other) + "\n").encode()
                      + b"garbage line\n" + encode(_ok("r9"))[:30])
    f.error.write_bytes(encode(error_record("e1", {}, "boom", {"class": "http_400", "dataset": "d"})))
    f.skipped.write_bytes(encode(skipped_record(None, "{x", "bad", "d", 12)))
    ex = scan(f)
    assert set(ex.done) == {"r1", 'q"uote\\d', "by-hand"} and ex.done["by-hand"]["completion_tokens"] == 4
    assert ex.done["r1"]["completion_tokens"] == 7
    assert set(ex.failed) == {"e1"} and ex.failed["e1"]["error"] == "boom"
    assert ex.skipped == {skipped_key("d", 12, None)}
    assert len(ex.repaired) == 1 and "torn last line (30 bytes)" in ex.repaired[0]
    assert ex.bad_lines == [f"{f.out}:4: not a JSON row with an id; left in place"]
    assert not f.out.read_bytes().endswith(b"r9")


def test_writer_writes_in_batches_by_count_and_by_age(tmp_path):
    now = [100.0]
    f = RunFiles.of(tmp_path / "o.jsonl")
    w = OutputWriter(f, batch_rows=3, batch_seconds=0.5, clock=lambda: now[0])
    w.add("success", _ok("a"))
    w.add("error", error_record("b", {}, "x", {}))
    assert not w.due() and f.out.read_bytes() == b""
    w.add("skipped", skipped_record("c", {}, "r", "d", 1))
    assert w.due()
    assert w.flush() == 3 and w.pending == 0
    assert [json.loads(l)["id"] for l in f.out.read_text().splitlines()] == ["a"]
    assert f.error.read_text().count("\n") == 1 and f.skipped.read_text().count("\n") == 1
    w.add("success", _ok("d"))
    now[0] += 0.4
    assert not w.due()
    now[0] += 0.1
    assert w.due()
    w.close()
    assert f.out.read_text().count("\n") == 2


def test_requeue_rewrites_the_error_file_without_the_moved_rows(tmp_path):
    f = RunFiles.of(tmp_path / "o.jsonl")
    f.error.write_bytes(encode(error_record("a", {}, "x", {"class": "context_length"}))
                        + encode(error_record("b", {}, "y", {"class": "http_503"})))
    assert requeue(f, "http_503") == 1
    assert [json.loads(l)["id"] for l in f.error.read_text().splitlines()] == ["a"]
    assert requeue(f) == 1 and f.error.read_text() == ""
    assert requeue(RunFiles.of(tmp_path / "none.jsonl")) == 0
    assert list(tmp_path.glob("*.tmp")) == []


def test_validate_finds_what_specforge_rejects_and_ids_against_inputs(tmp_path):
    f = RunFiles.of(tmp_path / "o.jsonl")
    user_last = _ok("u")
    user_last["conversations"] = [{"role": "user", "content": "q"}]
    wrong = _ok("w")
    wrong["status"] = "error"
    f.out.write_bytes(encode(_ok("a")) + encode(_ok("a")) + encode(user_last) + encode(wrong) + b"{not json\n")
    f.error.write_bytes(encode(error_record("e", {}, "x", {})))
    v = validate(f, expected={"a", "u", "w", "e", "lost"})
    assert not v.ok and v.duplicates == 1 and v.rows == 4
    assert v.missing == ["lost"] and v.unknown == []
    text = "\n".join(v.problems)
    assert f"{f.out}:2: id: 'a' is there twice" in text
    assert f"{f.out}:3: conversations: the last message is the user's" in text
    assert f"{f.out}:4: status: 'error'" in text and f"{f.out}:5: not JSON" in text
    f.out.write_bytes(encode(_ok("a")))
    assert validate(f, expected={"a", "e"}).ok


def test_last_snapshot_is_the_last_complete_line(tmp_path):
    p = tmp_path / "o.progress.jsonl"
    p.write_text('{"state": "running", "done": 1}\n{"state": "done", "done": 2}\n{"state": "tor')
    assert last_snapshot(p) == {"state": "done", "done": 2}
    assert last_snapshot(tmp_path / "none") is None
