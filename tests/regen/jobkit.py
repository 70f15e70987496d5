"""What the regeneration job tests share: the simulator as a real process, the CLI as a real
process, input files, and reading the output files back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]

# A simulated server that answers a 16-token request in a few milliseconds.
FAST_SIM = {"SPECDECK_SIM_SPEED": "200", "SPECDECK_SIM_BASELINE_TOK_S": "4000", "SPECDECK_SIM_PEAK_TOK_S": "400000"}


def wait_for(cond, timeout: float, what: str, every: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class SimServer:
    """``python -m backend.sim.server`` on 127.0.0.1; start() again on the same port after stop()."""

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None, port: int | None = None,
                 extra: list[str] | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(FAST_SIM, **(env or {}))
        self.extra = extra or []
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, wait: bool = True) -> "SimServer":
        e = {k: v for k, v in os.environ.items() if not k.startswith(("SPECDECK_SIM_", "SGLANG_"))}
        e.update(self.env)
        e["PYTHONUNBUFFERED"] = "1"
        self.starts += 1
        log = open(self.log_dir / f"sim-{self.port}-{self.starts}.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "backend.sim.server", "--host", "127.0.0.1",
                                      "--port", str(self.port), *self.extra],
                                     cwd=str(ROOT), env=e, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        if wait:
            wait_for(self.ready, 30, f"the simulator on {self.url}")
        return self

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"simulator exited {self.proc.returncode}")
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        end_process(self.proc)


def end_process(proc: subprocess.Popen | None, grace: float = 10.0) -> int | None:
    """SIGTERM, a grace period, then SIGKILL; the exit status."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "backend.cli", "regen", *args]


def start_cli(*args: str, log: Path) -> subprocess.Popen:
    fh = open(log, "ab")
    try:
        return subprocess.Popen(cli(*args), cwd=str(ROOT), stdout=fh, stderr=subprocess.STDOUT)
    finally:
        fh.close()


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cli(*args), cwd=str(ROOT), capture_output=True, text=True, timeout=timeout)


def write_rows(path: Path, n: int, *, start: int = 0, multi_every: int = 0, prefix: str = "r") -> list[str]:
    """``n`` SpecForge records (every ``multi_every``-th with a system turn and two user turns); their ids."""
    ids = []
    with open(path, "a") as f:
        for i in range(start, start + n):
            conv = [{"role": "user", "content": f"question {i}: write a function"},
                    {"role": "assistant", "content": "an old answer"}]
            if multi_every and i % multi_every == 0:
                conv = [{"role": "system", "content": "You write Python."}] + conv + [
                    {"role": "user", "content": f"now test {i}"}, {"role": "assistant", "content": "old tests"}]
            f.write(json.dumps({"id": f"{prefix}{i}", "conversations": conv}) + "\n")
            ids.append(f"{prefix}{i}")
    return ids


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def progress_lines(out: Path) -> list[dict[str, Any]]:
    return read_jsonl(out.with_name(out.name[:-6] + ".progress.jsonl"))


def sibling(out: Path, tail: str) -> Path:
    return out.with_name(out.name[:-6] + tail)
