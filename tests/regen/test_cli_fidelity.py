"""``regen run`` refusing what it cannot do, in words that name the thing: server addresses that
are not addresses, a folder as input, a resume with other inputs than the output was made from, a
full disk; and a SIGTERM while it starts ends it like one later (exit 130)."""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from backend.cli.regen import register
from backend.regen.config import JobConfig, ServerSpec, ServerURLError, normalize_url, write_job_json
from backend.regen.output import RunFiles
from tests.helpers import free_port
from tests.regen.jobkit import ROOT, cli, end_process, progress_lines, read_jsonl

pytestmark = pytest.mark.timeout(60)


def _regen(*argv: str) -> int:
    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="command"))
    args = p.parse_args(["regen", *argv])
    return args.func(args, sys.stdout)


@pytest.mark.parametrize("url, why", [
    ("htp:/garbage url", "no spaces"),
    ("htp:/garbage", "'htp' is not http or https and '//' is missing"),
    ("ftp://host:1", "the scheme 'ftp' is not http or https"),
    ("http://bad_host!:1", "'bad_host!' is not a host name"),
    ("http://host:abc", "the port is not a number"),
    ("localhost:", "no port after ':'"),
    ("http://host:1/v1?x=1", "no query or fragment"),
    ("http://:30000", "no host"),
])
def test_addresses_that_are_not_server_addresses_are_refused_with_the_reason(url, why):
    with pytest.raises(ServerURLError, match=f"^{url!r}: .*{why}".replace("?", r"\?")):
        normalize_url(url)


def test_server_addresses_that_are_kept():
    assert normalize_url("localhost:30000") == "http://localhost:30000"
    assert normalize_url(" https://gpu-7.cluster.local:8443/v1/ ") == "https://gpu-7.cluster.local:8443"
    assert normalize_url("http://[::1]:30000") == "http://[::1]:30000"
    assert normalize_url("HTTP://10.0.0.5:8000/router") == "http://10.0.0.5:8000/router"


def test_run_refuses_a_garbage_url_a_folder_and_other_inputs_than_the_output_was_made_from(tmp_path, capsys):
    inp = tmp_path / "a.jsonl"
    inp.write_text(json.dumps({"prompt": "q"}) + "\n")
    out = tmp_path / "o.jsonl"
    assert _regen("run", "--input", str(inp), "--server", "htp:/garbage url", "--out", str(out)) == 2
    assert "error: --server 'htp:/garbage url': a server address has no spaces" in capsys.readouterr().err
    assert not out.exists()

    assert _regen("run", "--input", str(tmp_path), "--server", "http://127.0.0.1:1", "--out", str(out)) == 2
    assert f"error: --input {tmp_path}: a folder, not a file" in capsys.readouterr().err

    files = RunFiles.of(out)
    write_job_json(files, JobConfig(out=files.out, servers=[ServerSpec("http://127.0.0.1:1")], inputs=[str(inp)]))
    other = tmp_path / "b.jsonl"
    other.write_text(json.dumps({"prompt": "another"}) + "\n")
    assert _regen("run", "--input", str(other), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert f"error: {out} was made from the files {inp} (see {files.job}); --input {other} is another input" in err
    assert json.loads(files.job.read_text())["inputs"] == [str(inp)]  # the run's parameters are untouched


def test_a_full_disk_names_the_file_and_keeps_what_was_written(tmp_path, capsys, monkeypatch):
    inp = tmp_path / "a.jsonl"
    inp.write_text(json.dumps({"prompt": "q"}) + "\n{not json\n")  # the second row goes to the skipped file
    out = tmp_path / "o.jsonl"
    skipped = RunFiles.of(out).skipped
    real_fsync = os.fsync

    def fsync(fd: int) -> None:  # the skipped file's disk is full: its fsync fails as it does on NFS
        if os.readlink(f"/proc/self/fd/{fd}") == str(skipped):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    code = _regen("run", "--input", str(inp), "--server", f"http://127.0.0.1:{free_port()}", "--out", str(out),
                  "--startup-timeout", "5")
    assert code == 1
    err = capsys.readouterr().err
    assert f"error: regen run failed: {skipped}: No space left on device; every row written before is kept" in err
    assert progress_lines(out)[-1]["state"] == "failed"


def _catches_sigterm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except FileNotFoundError:
        pass
    return False


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads signal dispositions from /proc")
def test_sigterm_while_starting_exits_130_like_later(tmp_path):
    inp = tmp_path / "a.jsonl"
    inp.write_text(json.dumps({"prompt": "q"}) + "\n")
    out = tmp_path / "o.jsonl"
    log = tmp_path / "run.log"
    with open(log, "wb") as fh:
        p = subprocess.Popen(cli("run", "--input", str(inp), "--server", f"http://127.0.0.1:{free_port()}",
                                 "--out", str(out)), cwd=str(ROOT), stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _catches_sigterm(p.pid) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        p.send_signal(signal.SIGTERM)  # as soon as regen run handles it: while it starts
        assert p.wait(30) == 130, log.read_text()
    finally:
        end_process(p)
    text = log.read_text()
    assert "stopped (SIGTERM) while starting" in text, text
    assert read_jsonl(out) == []
