"""The benchmark scripts in perf/ measure what they say: the size they ran at, a log without a
repeated block, each parser in a process of its own. Run small, so the suite stays quick."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "perf" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def ingest():
    return _load("bench_ingest")


@pytest.mark.timeout(120)
def test_logtail_names_the_size_it_ran_at(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "perf" / "bench_logtail.py"), "--size-gb", "0.02",
                        "--calls", "20", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "unchanged 0.02 GiB log, LogTailer.read()" in out and "unchanged 0.02 GiB log, read_tail" in out
    # 22 MB appended by then: the last figures name the size the log has grown to, never 1 GB
    assert "last 200 lines of the 0.04 GiB log" in out
    assert not re.search(r"\b1(\.00)? G(i)?B\b", out)
    assert list(tmp_path.iterdir()) == []  # the log is deleted


def test_ingest_log_is_drawn_fresh_line_by_line(ingest, tmp_path):
    log = tmp_path / "a.log"
    counts = ingest.write_log(log, 13 * 1024 * 1024, seed=0)  # about 90,000 lines: two of the old 40,000-line blocks
    lines = log.read_text().splitlines()
    assert sum(counts.values()) == len(lines) > 80000
    assert counts["decode"] == sum("Decode batch" in t for t in lines) > 1000
    # no repeated block: nearly every line occurs once, and the two halves share almost nothing
    assert len(set(lines)) > 0.97 * len(lines)
    half = len(lines) // 2
    assert len(set(lines[:half]) & set(lines[half:])) < 0.01 * half
    other = tmp_path / "b.log"
    ingest.write_log(other, 1024 * 1024, seed=1)
    assert not log.read_text().startswith(other.read_text()[:100000])


@pytest.mark.timeout(180)
def test_ingest_measures_each_parser_in_its_own_process(ingest, tmp_path):
    log = tmp_path / "server.log"
    counts = ingest.write_log(log, 1024 * 1024, seed=3)
    vec = ingest.run_child("vectorised", log, tmp_path)
    ref = ingest.run_child("per-line", log, tmp_path)
    assert len({vec["pid"], ref["pid"], os.getpid()}) == 3
    assert (vec["decode"], vec["prefill"]) == (ref["decode"], ref["prefill"]) == (counts["decode"], counts["prefill"])
    assert vec["digest"] == ref["digest"] and vec["unparsed"] == ref["unparsed"]
    assert vec["peak_rss_mb"] >= 0 and ref["peak_rss_mb"] >= 0


@pytest.mark.timeout(120)
def test_readcap_names_the_size_and_the_refusal(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "perf" / "bench_readcap.py"), "--size-gb", "0.05",
                        "--dir", str(tmp_path)], capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "with a 0.05 GiB config.json (sparse)" in out
    assert "over the 16 MiB read limit for a model config; not read" in out  # 51 MiB: refused, not read
    capped = re.search(r"inspect_checkpoint \(capped reads\): .* \(\+([\d,.]+) MiB\)", out)
    plain = re.search(r"json\.loads\(read_text\(\)\) \(before the caps\): .* \(\+([\d,.]+) MiB\)", out)
    assert capped and plain, out
    assert float(capped.group(1).replace(",", "")) < 10 < float(plain.group(1).replace(",", ""))
    assert list(tmp_path.iterdir()) == []  # the checkpoint is deleted
