"""Logs that survive rotation: the wrapper rotates its process's log by size and reopens it by name
after a ``create``-style rotation from outside; tailers read every line exactly once across both.

The in-process tests drive :class:`RotatingLog` and :class:`LogTailer` step by step (including more
than one rotation between two reads); the wrapper tests run the real wrapper and a real child that
prints a numbered sequence while the log is rotated under it, and end both at the end.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from backend.supervisor.logrotate import RotatingLog, rotated_path, successor_name
from backend.supervisor.logtail import LogTailer, read_tail
from backend.supervisor.runfiles import read_json
from specdeck_types.process import LOG_KEEP, LOG_MAX_BYTES, ProcessSpec
from tests.supervisor.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def numbered(lines: str) -> Counter:
    """How many times each numbered line ``n <k>`` was seen."""
    return Counter(int(x.split()[1]) for x in lines.splitlines() if x.startswith("n "))


def drain(tailer: LogTailer) -> str:
    out = []
    while True:
        c = tailer.read()
        assert not c.reset, f"a tailer started over: {c.flags}"
        if not c.text:
            return "".join(out)
        out.append(c.text)


def logrotate_create(path: Path, keep: int = 9) -> None:
    """What logrotate does with ``create``: shift NAME.1.. up, move NAME to NAME.1, create an empty NAME."""
    for n in range(keep - 1, 0, -1):
        if rotated_path(path, n).exists():
            os.replace(rotated_path(path, n), rotated_path(path, n + 1))
    os.rename(path, rotated_path(path, 1))
    path.touch()


# -- the rotating writer ---------------------------------------------------------------------------

def test_rotates_by_size_at_line_ends_and_keeps_the_newest_files(tmp_path):
    log = tmp_path / "p.log"
    w = RotatingLog(log, max_bytes=100, keep=3)
    for i in range(60):
        w.write(f"n {i:03d} {'x' * 10}\n".encode())  # 17 bytes a line
    w.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["p.log", "p.log.1", "p.log.2", "p.log.3"]
    for name in files:
        data = (tmp_path / name).read_bytes()
        assert data.endswith(b"\n") and len(data) <= 100  # never split inside a line
    # the kept files hold the newest lines, in order, each once
    text = "".join((tmp_path / n).read_text() for n in ["p.log.3", "p.log.2", "p.log.1", "p.log"])
    got = [int(x.split()[1]) for x in text.splitlines()]
    assert got == list(range(40, 60))  # 5 lines (85 bytes) a file: 12 files, the newest 4 kept
    assert w.rotations == 11


def test_a_line_longer_than_the_limit_stays_whole_and_zero_never_rotates(tmp_path):
    log = tmp_path / "p.log"
    w = RotatingLog(log, max_bytes=50, keep=2)
    w.write(b"short\n")
    w.write(b"y" * 120)  # one long line, written in pieces
    w.write(b"y" * 30 + b"\nnext\n")
    w.close()
    assert (tmp_path / "p.log.2").read_bytes() == b"short\n"  # the long line did not fit: a new file
    assert (tmp_path / "p.log.1").read_bytes() == b"y" * 150 + b"\n"
    assert log.read_bytes() == b"next\n"
    never = RotatingLog(tmp_path / "q.log", max_bytes=0)
    for _ in range(100):
        never.write(b"z" * 99 + b"\n")
    never.close()
    assert (tmp_path / "q.log").stat().st_size == 10_000 and not (tmp_path / "q.log.1").exists()


def test_writer_reopens_by_name_after_a_create_style_rotation(tmp_path):
    log = tmp_path / "p.log"
    w = RotatingLog(log, max_bytes=0)
    w.write(b"n 1\n")
    logrotate_create(log)
    w.write(b"n 2\n")
    os.unlink(log)  # moved away with nothing created in its place
    w.write(b"n 3\n")
    w.close()
    assert (tmp_path / "p.log.1").read_bytes() == b"n 1\n"
    assert log.read_bytes() == b"n 3\n"
    assert w.reopened == 2
    assert oct(log.stat().st_mode & 0o777) == oct(0o600)


def test_successor_names():
    assert successor_name("/l/s.log", "/l/s.log.3") == Path("/l/s.log.2")
    assert successor_name("/l/s.log", "/l/s.log.1") == Path("/l/s.log")
    assert successor_name("/l/s.log", "/l/s.log-20250101") == Path("/l/s.log")


def test_defaults_match_the_spec_and_the_workspace_settings(tmp_path):
    from backend.workspace import ProcessConfig

    spec = ProcessSpec(name="p", kind="other", argv=("true",), log_path="x")
    assert (spec.log_max_bytes, spec.log_keep) == (LOG_MAX_BYTES, LOG_KEEP)
    cfg = ProcessConfig(name="p", argv=["true"])
    assert int(cfg.log_max_mb * 2**20) == LOG_MAX_BYTES and cfg.log_keep == LOG_KEEP
    # an older stored spec (without the fields) reads back with the defaults
    d = json.loads(spec.to_json())
    del d["log_max_bytes"], d["log_keep"]
    assert ProcessSpec.from_dict(d) == spec


def test_log_settings_go_from_the_workspace_file_into_the_spec(tmp_path):
    from backend.workspace import ConfigError, load_workspace

    (tmp_path / "specdeck.toml").write_text(
        '[workspace]\nname = "w"\n\n[[process]]\nname = "a"\nargv = ["true"]\nlog_max_mb = 2.5\nlog_keep = 12\n\n'
        '[[process]]\nname = "b"\nargv = ["true"]\nlog_max_mb = 0\n')
    specs = {s.name: s for s in load_workspace(tmp_path).process_specs()}
    assert (specs["a"].log_max_bytes, specs["a"].log_keep) == (int(2.5 * 2**20), 12)
    assert (specs["b"].log_max_bytes, specs["b"].log_keep) == (0, LOG_KEEP)
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "w"\n\n[[process]]\nname = "a"\n'
                                            'argv = ["true"]\nlog_keep = 0\n')
    with pytest.raises(ConfigError, match="log_keep"):
        load_workspace(tmp_path)


# -- tailers across rotation, in process -------------------------------------------------------------

def test_tailer_reads_every_line_once_across_own_rotations(tmp_path):
    log = tmp_path / "p.log"
    rng = random.Random(7)
    w = RotatingLog(log, max_bytes=300, keep=20)
    tailers = [LogTailer(log), LogTailer(log, max_bytes=64)]  # one reads small pieces
    stateless = {"offset": 0, "inode": None, "text": []}
    seen = ["", ""]
    n = 0
    for _ in range(60):
        for _ in range(rng.randint(0, 40)):  # up to three rotations between two reads
            w.write(f"n {n} {'x' * rng.randint(0, 20)}\n".encode())
            n += 1
        for i, t in enumerate(tailers):
            seen[i] += drain(t)
        while True:  # the stateless form: offset and inode passed back by the caller
            c = read_tail(log, stateless["offset"], 128, inode=stateless["inode"], skip_ahead=False)
            assert not c.reset
            stateless["offset"], stateless["inode"] = c.offset, c.inode
            if not c.text:
                break
            stateless["text"].append(c.text)
    w.close()
    assert w.rotations >= 20
    want = Counter(range(n))
    assert numbered(seen[0]) == want
    assert numbered(seen[1]) == want
    assert numbered("".join(stateless["text"])) == want


def test_tailer_follows_a_writer_that_keeps_writing_to_the_moved_file(tmp_path):
    """The fault: logrotate moved the log (create style) and the program kept writing to the moved
    file.  The tailer reads on there; once the program writes to the new file, it goes on there."""
    log = tmp_path / "p.log"
    fh = open(log, "ab", buffering=0)  # a program that holds its log open
    t = LogTailer(log)
    seen = ""
    for i in range(10):
        fh.write(f"n {i}\n".encode())
    seen += drain(t)
    logrotate_create(log)
    for i in range(10, 25):  # still written to the moved file, now p.log.1
        fh.write(f"n {i}\n".encode())
        if i % 5 == 0:
            seen += drain(t)
    fh.write(b"n 25 and half a li")  # an unfinished line at the end of the moved file
    seen += drain(t)
    assert numbered(seen) == Counter(range(25))  # nothing of the moved file missed while the new one is empty
    fh.close()
    fh = open(log, "ab", buffering=0)  # the program reopens by name
    fh.write(b"ne\n")
    for i in range(26, 40):
        fh.write(f"n {i}\n".encode())
    seen += drain(t)
    fh.close()
    assert numbered(seen) == Counter(range(40))
    assert "n 25 and half a line\n" in seen  # the line split across the two files is whole


# -- the real wrapper --------------------------------------------------------------------------------

CHILD = """
import os, sys, time
n, pause = int(sys.argv[1]), float(sys.argv[2])
deadline = time.monotonic() + 60
while not os.path.exists("go") and time.monotonic() < deadline:  # the test's tailer is in place
    time.sleep(0.01)
for i in range(n):
    sys.stdout.write(f"n {i} {'x' * (i % 37)}\\n")
    sys.stdout.flush()
    if i % 50 == 0:
        time.sleep(pause)
"""


def start_wrapper(tmp_path: Path, count: int, pause: float, *, hold: bool = False,
                  **settings) -> tuple[subprocess.Popen, Path, Path]:
    """The wrapper running CHILD in ``tmp_path``; with ``hold`` the child writes its lines only once
    :func:`follow_until_exit` has its tailer on the log (a loaded machine may start the tailer late)."""
    if not hold:
        (tmp_path / "go").touch()
    run = tmp_path / "run" / "p"
    run.mkdir(parents=True)
    log = tmp_path / "logs" / "p.log"
    spec = ProcessSpec(name="p", kind="other", argv=(PY, "-c", CHILD, str(count), str(pause)),
                       log_path=str(log), **settings)
    launch = {"name": "p", "run_id": "r1", "argv": list(spec.argv), "cwd": str(tmp_path), "env": {},
              "log_path": str(log), "stop_grace_s": 2.0, "spec": json.loads(spec.to_json())}
    (run / "launch.json").write_text(json.dumps(launch))
    proc = subprocess.Popen([PY, "-m", "backend.supervisor.wrapper", str(run / "launch.json")], cwd=str(REPO),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    return proc, run, log


@pytest.fixture
def wrappers():
    started: list[tuple[subprocess.Popen, Path]] = []
    yield started
    for proc, run in started:
        ident = read_json(run / "identity.json")
        if ident and proc.poll() is None:
            try:
                os.killpg(ident["pid"], signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def follow_until_exit(proc: subprocess.Popen, run: Path, log: Path, during=None) -> str:
    """Tail the log until the wrapper has written exit.json and the tailer is at the end."""
    t = LogTailer(log)
    seen = []
    wait_for(lambda: log.exists(), timeout_s=10)
    seen.append(drain(t))  # the tailer is on the first file: the child may write now
    (run.parent.parent / "go").touch()
    while True:
        done = (run / "exit.json").exists()
        if during is not None:
            during()
        seen.append(drain(t))
        if done:
            seen.append(drain(t))
            return "".join(seen)
        time.sleep(0.01)


def test_wrapper_rotates_its_log_and_the_tailer_reads_every_line_once(tmp_path, wrappers):
    count = 20000  # about 470 kB of numbered lines
    proc, run, log = start_wrapper(tmp_path, count, 0.002, hold=True, log_max_bytes=16 * 1024, log_keep=100)
    wrappers.append((proc, run))
    seen = follow_until_exit(proc, run, log)
    assert proc.wait(timeout=10) == 0, proc.stderr.read().decode()
    assert numbered(seen) == Counter(range(count))
    assert read_json(run / "exit.json")["exit_code"] == 0
    rotated = sorted(log.parent.glob("p.log.*"))
    assert len(rotated) >= 20  # the wrapper rotated it, at the size asked for
    assert all(p.stat().st_size <= 16 * 1024 for p in rotated)
    assert seen.count("===== specdeck: p run r1 starting") == 1 and seen.count("===== specdeck: p run r1 ended") == 1


def test_wrapper_keeps_only_log_keep_files(tmp_path, wrappers):
    proc, run, log = start_wrapper(tmp_path, 20000, 0.0, log_max_bytes=8 * 1024, log_keep=3)
    wrappers.append((proc, run))
    assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()
    assert sorted(p.name for p in log.parent.iterdir()) == ["p.log", "p.log.1", "p.log.2", "p.log.3"]
    text = "".join(p.read_text() for p in [rotated_path(log, 3), rotated_path(log, 2), rotated_path(log, 1), log])
    got = [int(x.split()[1]) for x in text.splitlines() if x.startswith("n ")]
    assert got == list(range(20000 - len(got), 20000))  # the newest lines, in order, none twice


def test_create_style_rotation_from_outside_loses_and_repeats_nothing(tmp_path, wrappers):
    """Fault 3: logrotate (create) moves the log aside while the process writes.  The wrapper goes on
    in the new file, and the tailer reads every line exactly once across the moves."""
    count = 30000
    proc, run, log = start_wrapper(tmp_path, count, 0.003, hold=True, log_max_bytes=0)
    wrappers.append((proc, run))
    moves = {"n": 0, "next": time.monotonic() + 0.2}

    def rotate_now_and_then():
        if time.monotonic() >= moves["next"] and moves["n"] < 5 and log.exists():
            logrotate_create(log, keep=9)
            moves["n"] += 1
            moves["next"] = time.monotonic() + 0.15

    seen = follow_until_exit(proc, run, log, during=rotate_now_and_then)
    assert proc.wait(timeout=10) == 0, proc.stderr.read().decode()
    assert moves["n"] >= 2, "the child ended before the log was rotated twice"
    assert numbered(seen) == Counter(range(count))
    # the process's output went on in the new file: the live log holds its last line and the end
    live = log.read_text()
    assert f"n {count - 1} " in live and "===== specdeck: p run r1 ended" in live
