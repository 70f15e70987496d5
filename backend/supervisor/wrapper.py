"""The small process that owns one managed child.

Started by the supervisor as ``python -m backend.supervisor.wrapper LAUNCH``
in a session of its own, so it outlives the dashboard.  It:

1. starts the child in another new session (its own process group, so
   ``killpg`` reaches the child and everything it starts), with stdout and
   stderr going to a pipe that a thread of the wrapper copies into the
   process's log after a header line.  The wrapper is the log's one writer:
   it rotates the log by size (``log_max_bytes`` and ``log_keep`` of the
   launch's spec)
   and, when the log was moved away from outside (logrotate's ``create``
   style), reopens it by name (:mod:`backend.supervisor.logrotate`);
2. writes ``identity.json`` (child pid and create time, wrapper pid, run id);
3. waits for the child; when it has ended, ends what is left of its process
   group (SIGTERM, the spec's stop grace period, then SIGKILL), so nothing
   it started outlives it;
4. writes ``exit.json`` (exit code, negative for a signal, end time, and how
   many leftovers it ended), whether or not any supervisor is running.

The child is waited for without being reaped until its group is empty: its
pid, hence the group id, stays taken meanwhile, so the group signals can
only reach the child's own group, never one that reuses the id.

It ignores SIGTERM, SIGINT and SIGHUP: stopping is done by signalling the
child's group, and the wrapper ends when the child has ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from backend.filemodes import make_private_dirs
from backend.supervisor.groups import group_members
from backend.supervisor.logrotate import RotatingLog
from backend.supervisor.runfiles import ExitRecord, Identity, RunPaths, read_json, write_exit, write_identity
from backend.supervisor.starts import start_of
from specdeck_types.process import LOG_KEEP, LOG_MAX_BYTES

_IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _restore_signals() -> None:
    # Runs in the child between fork and exec: ignored dispositions survive
    # exec, and the child must die on SIGTERM like any normal program.
    for sig in _IGNORED:
        signal.signal(sig, signal.SIG_DFL)


_READ = 64 * 1024
DRAIN_S = 5.0  # after the child's group is empty, how long its output may take to reach the log


def _copy(fd: int, log: RotatingLog) -> None:
    """Copy the child's output from the pipe into the log until every writer has closed it."""
    try:
        while True:
            data = os.read(fd, _READ)
            if not data:
                return
            log.write(data)
    except OSError:
        return
    finally:
        os.close(fd)


def _int_setting(launch: dict, key: str, default: int, least: int) -> int:
    """A log setting of the launch: its own key, else the spec's field it carries, else ``default``."""
    spec = launch.get("spec")
    value = launch.get(key, spec.get(key, default) if isinstance(spec, dict) else default)
    try:
        return max(least, int(value))
    except (TypeError, ValueError, OverflowError):
        return default


def _wait_until_empty(pgid: int, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while True:
        left = group_members(pgid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def _end_leftovers(pgid: int, grace_s: float) -> tuple[int, int]:
    """SIGTERM the group, wait up to ``grace_s``, SIGKILL what is left.
    Returns (members found, members that needed SIGKILL)."""
    found = group_members(pgid)
    if not found:
        return 0, 0
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return len(found), 0
    left = _wait_until_empty(pgid, grace_s)
    if not left:
        return len(found), 0
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _wait_until_empty(pgid, 5.0)
    return len(found), len(left)


def _wait_unreaped(child: subprocess.Popen) -> None:
    """Block until the child has ended, leaving it a zombie (pid still taken)."""
    if not hasattr(os, "waitid"):
        return
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        pass


def run(launch_path: Path) -> int:
    for sig in _IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    launch = read_json(launch_path)
    if launch is None:
        print(f"specdeck wrapper: {launch_path}: missing or not a JSON object", file=sys.stderr)
        return 2
    paths = RunPaths(launch_path.parent)
    run_id = str(launch["run_id"])
    name = str(launch["name"])
    argv = [str(a) for a in launch["argv"]]
    log_path = Path(launch["log_path"])
    make_private_dirs(log_path.parent)
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (launch.get("env") or {}).items()})
    env["SPECDECK_PROCESS"] = name
    env["SPECDECK_RUN_ID"] = run_id
    try:
        grace_s = max(0.0, float(launch.get("stop_grace_s", 10.0)))
    except (TypeError, ValueError):
        grace_s = 10.0

    log = RotatingLog(log_path, _int_setting(launch, "log_max_bytes", LOG_MAX_BYTES, 0),
                      _int_setting(launch, "log_keep", LOG_KEEP, 1))
    started_at = time.time()
    log.begin_line()
    log.write(f"===== specdeck: {name} run {run_id} starting at {_stamp(started_at)}: "
              f"{subprocess.list2cmdline(argv)}\n".encode("utf-8", "replace"))
    log_offset = log.size
    out_r, out_w = os.pipe()
    try:
        child = subprocess.Popen(
            argv,
            cwd=launch.get("cwd") or None,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=_restore_signals,
        )
    except OSError as exc:
        os.close(out_r)
        os.close(out_w)
        ended_at = time.time()
        log.write(f"===== specdeck: {name} run {run_id} could not start: {exc}\n".encode("utf-8", "replace"))
        write_exit(paths, ExitRecord(run_id, 127, ended_at, None, f"could not start: {exc}"))
        return 0
    os.close(out_w)  # the child (and what it starts) holds the only write ends
    copier = threading.Thread(target=_copy, args=(out_r, log), name="log-copy", daemon=True)
    copier.start()
    write_identity(
        paths,
        Identity(
            run_id=run_id,
            pid=child.pid,
            create_time=start_of(child.pid),
            wrapper_pid=os.getpid(),
            wrapper_create_time=start_of(os.getpid()),
            started_at=started_at,
            log_offset=log_offset,
        ),
    )
    _wait_unreaped(child)
    ended_at = time.time()
    leftovers, killed = _end_leftovers(child.pid, grace_s)
    code = child.wait()
    # the pipe ends when the last process holding it has ended (one that left the group may hold it on)
    copier.join(DRAIN_S)
    log.begin_line()
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    if leftovers:
        how += (f"; ended {leftovers} leftover process{'es' if leftovers != 1 else ''} of its group"
                + (f" ({killed} after SIGKILL)" if killed else ""))
    if log.dropped:
        how += f"; {log.dropped:,} bytes of its output could not be written to the log ({log.last_error})"
    log.write(f"===== specdeck: {name} run {run_id} ended at {_stamp(ended_at)}: {how}\n".encode())
    write_exit(paths, ExitRecord(run_id, code, ended_at, child.pid, leftovers=leftovers, leftovers_killed=killed))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m backend.supervisor.wrapper RUN_DIR/NAME/launch.json", file=sys.stderr)
        return 2
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
