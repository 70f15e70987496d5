"""What the regeneration job tests share: the simulator in threads of the test process (the job
is what these tests are about), the CLI as a real process, input files, and reading the output
files back."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import free_port, wait_for
from tests.sim.simproc import start_sim_thread

ROOT = Path(__file__).resolve().parents[2]

# A simulated server that answers a 16-token request in a few milliseconds.
FAST_SIM = {"SPECDECK_SIM_SPEED": "200", "SPECDECK_SIM_BASELINE_TOK_S": "4000", "SPECDECK_SIM_PEAK_TOK_S": "400000"}


class SimServer:
    """The simulated server on 127.0.0.1, in threads of this process (backend.sim.server.serve);
    start() again on the same port after stop()."""

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
        self.starts += 1
        log = self.log_dir / f"sim-{self.port}-{self.starts}.log"
        self.proc = start_sim_thread(self.extra, log, self.env, port=self.port).proc
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


def run_cli_top(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m backend.cli ARGS`` (any command)."""
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=timeout)


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
    """Every complete line (a line still being written by a running job is left out)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.strip()]


def progress_lines(out: Path) -> list[dict[str, Any]]:
    return read_jsonl(out.with_name(out.name[:-6] + ".progress.jsonl"))


def sibling(out: Path, tail: str) -> Path:
    return out.with_name(out.name[:-6] + tail)
