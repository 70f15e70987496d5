"""A simulated server as a real process on 127.0.0.1, shared by the simulator's tests."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start_sim(args: list[str], log: Path, env: dict[str, str] | None = None, *, port: int | None = None) -> "Sim":
    """``python -m backend.sim.server --host 127.0.0.1 --port PORT ARGS`` with its output in ``log``
    and no simulator or SGLang settings from this environment but ``env``; not waited for (see
    :meth:`Sim.wait_ready`)."""
    from tests.helpers import free_port  # noqa: PLC0415

    port = port or free_port()
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SPECDECK_SIM_", "SGLANG_"))}
    e["PYTHONUNBUFFERED"] = "1"
    e.update(env or {})
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "backend.sim.server", "--host", "127.0.0.1",
                                 "--port", str(port), *args],
                                cwd=str(ROOT), env=e, stdout=fh, stderr=subprocess.STDOUT)
    return Sim(proc, port, log)


def start_sim_thread(args: list[str], log: Path, env: dict[str, str] | None = None, *,
                     port: int | None = None) -> "Sim":
    """:func:`start_sim`'s server in threads of this process (backend.sim.server.serve): the same
    flags, settings and log lines, no interpreter to start; where the process is not the point."""
    from backend.sim.server import serve  # noqa: PLC0415
    from tests.helpers import free_port  # noqa: PLC0415

    port = port or free_port()
    fh = open(log, "a", encoding="utf-8")
    served = serve(["--host", "127.0.0.1", "--port", str(port), *args], env or {}, out=fh)
    return Sim(ThreadProc(served, fh), port, log)


class ThreadProc:
    """What the tests ask of a server's ``Popen`` (poll, wait, send_signal, kill, returncode) for
    a server from :func:`backend.sim.server.serve`: SIGTERM, SIGINT and SIGKILL all stop it."""

    def __init__(self, served, log_fh) -> None:
        self.served, self._fh = served, log_fh
        self.returncode: int | None = served if isinstance(served, int) else None
        if self.returncode is not None:
            log_fh.close()

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.served.poll()
            if self.returncode is not None:
                self._fh.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired("backend.sim.server (thread)", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, _sig: int) -> None:
        if self.returncode is None:
            self.served.sim.stop.set()

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Sim:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.base = f"http://127.0.0.1:{port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def lines(self) -> list[str]:
        return self.text().splitlines()

    def request(self, path: str, body: dict | None = None, headers: dict | None = None,
                timeout: float = 30.0) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        if data is not None:
            req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def status(self, path: str) -> int | None:
        try:
            return self.request(path, timeout=2)[0]
        except (urllib.error.URLError, ConnectionError, socket.timeout):
            return None

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"sim exited {self.proc.returncode}:\n{self.text()}")
            if self.status("/health") == 200:
                return
            time.sleep(0.05)
        raise AssertionError(f"sim not ready:\n{self.text()}")

    def wait_for(self, pattern: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.text(), re.M):
                return
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r}:\n{self.text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def spec_args(dirs, algo: str, draft: str = "eagle3") -> list[str]:
    return ["--model-path", str(dirs["target"]), "--speculative-algorithm", algo,
            "--speculative-draft-model-path", str(dirs[draft]), "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
