"""SGLang's own benchmark (``python -m sglang.benchmark.serving``, ``sglang.bench_serving`` before
0.5.23) run in a server's serving environment: whether that environment has it (found without importing
sglang, which pulls in the GPU stack), its command line for a load, and the run itself as a process group
whose progress bar is read and whose output goes to a log (a stop or a timeout ends it, SIGTERM first).
:mod:`backend.flows.bench_runner` imports the record it writes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from backend.bench.client import DATASET, Load
from backend.filemodes import open_private

STOP_GRACE_S = 10.0

_PROBE = ("import importlib.util, json, os\n"
          "s = importlib.util.find_spec('sglang')\n"
          "d = os.path.dirname(s.origin) if s and s.origin else None\n"
          "print(json.dumps({'sglang': bool(d), 'new': bool(d) and os.path.exists("
          "os.path.join(d, 'benchmark', 'serving.py'))}))\n")


def serving_module(python: str | None, timeout_s: float = 60.0) -> str | None:
    """The benchmark module of the sglang in ``python``'s environment, or None without sglang.
    Found without importing sglang (which pulls in the GPU stack)."""
    if not python:
        return None
    try:
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s)
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    if not found.get("sglang"):
        return None
    return "sglang.benchmark.serving" if found.get("new") else "sglang.bench_serving"


def bench_serving_argv(python: str, module: str, base_url: str, load: Load, tokenizer: str | None,
                       output_file: Path) -> list[str]:
    argv = [python, "-m", module, "--backend", load.backend, "--base-url", base_url.rstrip("/"),
            "--dataset-name", DATASET, "--num-prompts", str(load.num_prompts),
            "--random-input-len", str(load.input_len), "--random-output-len", str(load.output_len),
            "--random-range-ratio", "1.0", "--max-concurrency", str(load.concurrency),
            "--request-rate", "inf", "--seed", str(load.seed),
            "--warmup-requests", str(load.warmup_requests), "--output-file", str(output_file)]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    if load.model:
        argv += ["--model", load.model]
    return argv


def _stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the benchmark's process group, the grace period, then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass


def run_bench_serving(argv: list[str], env: dict[str, str], *, cwd: Path, log_file: Path,
                      progress: Callable[[int, int], None] | None = None,
                      stop: threading.Event | None = None, timeout_s: float | None = None) -> int:
    """Run bench_serving, its output to ``log_file``; ``progress(done, total)`` from its progress bar.
    Returns its exit status; a ``stop`` event or the timeout ends it (SIGTERM first)."""
    bar = re.compile(rb"(\d+)/(\d+) \[")
    failed: list[BaseException] = []  # a progress report that raised (a full disk): raised here once it ended
    with open_private(log_file, "ab") as log:
        proc = subprocess.Popen(argv, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def pump() -> None:
            assert proc.stdout is not None
            while True:
                chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.read(4096)
                if not chunk:
                    return
                try:
                    log.write(chunk)
                    log.flush()
                    if progress is not None and not failed:
                        found = bar.findall(chunk)
                        if found:
                            done, total = found[-1]
                            progress(int(done), int(total))
                except OSError as exc:  # keep reading, or bench_serving blocks on a full pipe
                    if not failed:
                        failed.append(exc)

        reader = threading.Thread(target=pump, name="bench-serving-output", daemon=True)
        reader.start()
        try:
            while proc.poll() is None:
                if failed or (stop is not None and stop.is_set()) or \
                        (deadline is not None and time.monotonic() > deadline):
                    _stop_group(proc)
                    break
                try:
                    proc.wait(0.2)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if proc.poll() is None:
                _stop_group(proc)
            reader.join(10)
    if failed:
        raise failed[0]
    return proc.returncode
