"""What every consumer of the output reads: only valid UTF-8 is written (a lone surrogate in an
input row or a server answer is replaced and counted, or its row skipped with the reason), and
``validate`` decodes as strictly as SpecForge's validator and pyarrow do."""

from __future__ import annotations

import json

import pytest

from backend.regen.output import (OutputWriter, RunFiles, encode, encode_counted, error_record, skipped_record,
                                  success_record, validate)

LONE = "\ud800"


def _ok(rid: str, answer: str, **extra) -> dict:
    return success_record(rid, {"id": rid, "conversations": [], **extra},
                          [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}],
                          {"server": "http://s:1", "prompt_tokens": 3, "completion_tokens": 4,
                           "finish_reason": "stop", "dataset": "d", "t": 1.0, "retries": 0})


def test_a_lone_surrogate_is_written_as_u_fffd_and_counted_on_its_row():
    line, n = encode_counted(_ok("r1", f"half {LONE} a pair", source=f"x{LONE}{LONE}"))
    text = line.decode("utf-8")  # strict: raises on the bytes surrogatepass used to write
    row = json.loads(text)
    assert n == 3 and row["regen"]["replaced_chars"] == 3
    assert row["conversations"][1]["content"] == "half \ufffd a pair" and row["source"] == "x\ufffd\ufffd"
    assert text.startswith('{"id": "r1", "status": "success", "regen": {')  # a resume still reads the head
    # a valid pair (an emoji) is not a surrogate in a Python string and is kept as it is
    line, n = encode_counted(_ok("r2", "ok \U0001F600"))
    assert n == 0 and "replaced_chars" not in json.loads(line)["regen"]
    assert encode(_ok("r2", "ok \U0001F600")) == line


def test_the_writer_counts_replacements_over_every_file(tmp_path):
    files = RunFiles.of(tmp_path / "o.jsonl")
    w = OutputWriter(files)
    assert w.add("success", _ok("a", LONE)) == 1
    assert w.add("error", error_record("b", {"id": "b", "note": LONE + LONE}, "HTTP 400", {"class": "x"})) == 2
    assert w.add("skipped", skipped_record(None, {"prompt": LONE}, "in.jsonl:3: prompt: a lone surrogate",
                                           "d", 3)) == 1
    w.close()
    assert w.replaced == 4
    for p in (files.out, files.error, files.skipped):
        p.read_bytes().decode("utf-8")
    v = validate(files)
    assert v.ok, v.problems


def test_validate_refuses_invalid_utf8_and_lone_surrogate_escapes_in_every_file(tmp_path):
    files = RunFiles.of(tmp_path / "o.jsonl")
    good = encode(_ok("g", "fine \U0001F600"))
    # what surrogatepass wrote: the three bytes of U+D800, which no strict decoder reads
    bad_bytes = json.dumps(_ok("b", LONE), ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
    # the same as an escape: Python reads it, pyarrow (HF datasets) does not
    bad_escape = (json.dumps(_ok("e", LONE)) + "\n").encode()
    pair_escape = (json.dumps(_ok("p", "\U0001F600")) + "\n").encode()  # \ud83d\ude00: a valid pair
    files.out.write_bytes(good + bad_bytes + bad_escape + pair_escape)
    files.skipped.write_bytes(b'{"status": "skipped", "raw": "\xff"}\n')
    v = validate(files)
    assert not v.ok and v.rows == 2 and v.problem_count == 3, v.problems
    assert v.problems[0].startswith(f"{files.out}:2: not valid UTF-8 (byte 0xed at byte ")
    assert v.problems[1].startswith(f"{files.out}:3: conversations[1].content: a lone surrogate escape")
    assert v.problems[2].startswith(f"{files.skipped}:1: not valid UTF-8 (byte 0xff at byte ")


def test_pyarrow_reads_what_the_writer_wrote(tmp_path):
    pa_json = pytest.importorskip("pyarrow.json")
    files = RunFiles.of(tmp_path / "o.jsonl")
    w = OutputWriter(files)
    w.add("success", _ok("a", f"x{LONE}y"))
    w.add("success", _ok("b", "plain"))
    w.close()
    rows = pa_json.read_json(files.out).to_pylist()
    assert [r["id"] for r in rows] == ["a", "b"] and rows[0]["conversations"][1]["content"] == "x\ufffdy"
    # what pyarrow refuses: the bytes surrogatepass wrote, and the lone surrogate as an escape
    for i, data in enumerate((json.dumps(_ok("a", LONE), ensure_ascii=False).encode("utf-8", "surrogatepass"),
                              json.dumps(_ok("a", LONE)).encode())):
        bad = tmp_path / f"bad{i}.jsonl"
        bad.write_bytes(data + b"\n")
        with pytest.raises((ValueError, UnicodeDecodeError)):
            pa_json.read_json(bad).to_pylist()
