"""Attribution with real processes: a managed parent whose child and grandchild hold GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from backend.telemetry.attribution import attribute, coerce_managed, describe_pid, format_gpus, ppid_map
from backend.telemetry.fake import FakeNvml
from backend.telemetry.nvml import NvmlAdapter

GIB = 1024**3

# The server spawns one worker, which spawns another (tensor-parallel ranks);
# each prints its pid and then sleeps until stdin closes.
TREE = r"""
import subprocess, sys
depth = int(sys.argv[1])
child = None
if depth > 0:
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2], str(depth - 1), sys.argv[2]],
                             stdin=subprocess.PIPE, stdout=sys.stdout)
print(depth, flush=True)
import os
print("pid", os.getpid(), flush=True)
sys.stdin.read()
if child is not None:
    child.stdin.close()
    child.wait(10)
"""


@pytest.fixture
def tree():
    """A real three-level process tree; ended (all levels) after the test."""
    root = subprocess.Popen(
        [sys.executable, "-c", TREE, "2", TREE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pids = []
    try:
        deadline = time.monotonic() + 20
        while len(pids) < 3 and time.monotonic() < deadline:
            line = root.stdout.readline()
            if line.startswith("pid "):
                pids.append(int(line.split()[1]))
        assert len(pids) == 3, "process tree did not start"
        yield root, pids
    finally:
        procs = []
        for pid in pids:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        root.stdin.close()
        try:
            root.wait(10)
        except subprocess.TimeoutExpired:
            root.kill()
            root.wait(5)
        gone, alive = psutil.wait_procs(procs, timeout=10)
        for p in alive:
            p.kill()
        psutil.wait_procs(alive, timeout=5)
        root.stdout.close()


def test_tree_pids_on_gpus_belong_to_the_managed_job(tree):
    root, pids = tree
    server_pid = root.pid
    assert server_pid in pids
    workers = [p for p in pids if p != server_pid]
    parents = ppid_map()
    assert parents[workers[0]] in pids and parents[workers[1]] in pids  # a real chain

    fake = FakeNvml()
    for g in range(8):  # the workers hold GPUs 0-7, the server holds nothing itself
        fake.set_processes(g, [(workers[g % 2], 61 * GIB)])
    fake.set_processes(3, [(workers[1], 61 * GIB), (999_999_1, 2 * GIB)])  # plus someone else's
    frame = NvmlAdapter(fake).sample()
    procs = [p for g in frame.gpus for p in g.processes]
    attr = attribute(procs, [("main", "server", server_pid, "RUNNING")])

    assert [j.name for j in attr.jobs] == ["main"]
    job = attr.jobs[0]
    assert job.gpus == tuple(range(8))
    assert set(job.pids) == set(workers)
    assert job.summary == "server main holds GPUs 0-7, 61.0 GiB each"
    assert all(attr.jobs_on(g) == ("main",) for g in range(8))
    (other,) = attr.unmanaged()
    assert other.gpu_index == 3 and other.pid == 999_999_1
    assert other.user is None and "not visible" in other.na
    assert "pid 9999991" in attr.who(3)


def test_training_run_on_one_gpu_and_unmanaged_process_with_user_and_command(tree):
    root, pids = tree
    me = os.getpid()
    procs = NvmlAdapter(FakeNvml(processes={3: [(pids[-1], 20 * GIB)], 5: [(me, 3 * GIB)]})).sample()
    gp = [p for g in procs.gpus for p in g.processes]
    attr = attribute(gp, [("run-x", "training", root.pid)])
    assert attr.jobs[0].summary == "training run run-x on GPU 3, 20.0 GiB"
    (mine,) = attr.unmanaged()
    assert mine.pid == me and mine.gpu_index == 5
    assert mine.user == psutil.Process(me).username()
    assert "python" in mine.command.lower()


def test_a_job_with_no_gpu_process_is_not_listed():
    attr = attribute([], [("bench", "benchmark", os.getpid())])
    assert attr.jobs == () and attr.holders == ()
    assert attr.who(0) == "no processes"


def test_unequal_memory_and_missing_memory():
    from backend.telemetry.model import GpuProcess

    procs = [GpuProcess(0, 10, 40 * GIB), GpuProcess(1, 10, 60 * GIB), GpuProcess(2, 11, None)]
    attr = attribute(procs, [("a", "server", 10), ("b", "other", 11)], parents={})
    assert attr.jobs[0].summary == "server a holds GPUs 0-1, 40.0-60.0 GiB per GPU"
    assert attr.jobs[1].summary == "process b on GPU 2, memory N/A"


def test_format_gpus_and_coerce():
    assert format_gpus([3]) == "GPU 3"
    assert format_gpus([0, 1, 2, 3, 5, 7, 6]) == "GPUs 0-3, 5-7"
    assert format_gpus([]) == "no GPU"

    class View:
        name, pid = "main", 12

        class kind:
            value = "server"

        class state:
            value = "RUNNING"

    (m,) = coerce_managed([View()])
    assert (m.name, m.kind, m.pid, m.state) == ("main", "server", 12, "RUNNING")


def test_describe_pid_never_raises_for_a_missing_pid():
    user, cmd, why = describe_pid(2**22 + 12345)
    assert user is None and cmd is None and why


def test_two_processes_of_one_job_on_one_gpu_count_together():
    from backend.telemetry.model import GpuProcess

    # server 10 with a scheduler (11) and a worker (12) on GPU 0; only the worker on GPU 1
    parents = {11: 10, 12: 10}
    procs = [GpuProcess(0, 11, 2 * GIB), GpuProcess(0, 12, 59 * GIB), GpuProcess(1, 12, 61 * GIB)]
    attr = attribute(procs, [("main", "server", 10)], parents=parents)
    (job,) = attr.jobs
    assert job.mem_by_gpu == ((0, 61 * GIB), (1, 61 * GIB))
    assert job.summary == "server main holds GPUs 0-1, 61.0 GiB each"
    assert job.pids == (11, 12)


def test_a_job_process_whose_memory_nvml_cannot_read_makes_that_gpu_na_not_a_smaller_number():
    from backend.telemetry.model import GpuProcess

    procs = [GpuProcess(0, 11, 2 * GIB), GpuProcess(0, 12, None), GpuProcess(1, 12, 61 * GIB)]
    attr = attribute(procs, [("main", "server", 10)], parents={11: 10, 12: 10})
    (job,) = attr.jobs
    assert job.mem_by_gpu == ((0, None), (1, 61 * GIB))
    assert job.summary == "server main holds GPUs 0-1, memory N/A"
    # the unreadable one listed alone is N/A too, whatever order NVML gives
    attr = attribute(list(reversed(procs)), [("main", "server", 10)], parents={11: 10, 12: 10})
    assert dict(attr.jobs[0].mem_by_gpu)[0] is None
