"""Who holds which GPU: NVML process ids joined with our managed process trees.

Input is a plain list of managed processes, ``(name, kind, pid)`` or
``(name, kind, pid, state)`` tuples, or any object with those attributes
(the supervisor's ``ProcessView`` fits).  Each managed pid stands for its
whole process tree: tensor-parallel workers are children of the server, so
a GPU process whose pid is a descendant of a managed pid belongs to that job.
GPU processes we do not manage are shown with their user and command.

NVML reports host pids; inside a container with its own pid namespace they
may not be visible, and such processes are listed as "not visible".
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from backend.telemetry.model import GIB, GpuProcess

try:
    import psutil
except ImportError:  # pragma: no cover - bare machines
    psutil = None  # type: ignore[assignment]

KIND_LABELS = {
    "server": "server",
    "training": "training run",
    "regeneration": "regeneration",
    "benchmark": "benchmark",
    "other": "process",
}


@dataclass(frozen=True)
class Managed:
    name: str
    kind: str
    pid: int | None
    state: str | None = None


def coerce_managed(items: Iterable[Any]) -> list[Managed]:
    out = []
    for m in items:
        if isinstance(m, Managed):
            out.append(m)
            continue
        if isinstance(m, (tuple, list)):
            name, kind, pid = m[0], m[1], m[2]
            state = m[3] if len(m) > 3 else None
        else:
            name, kind = m.name, m.kind
            pid, state = getattr(m, "pid", None), getattr(m, "state", None)
        kind = getattr(kind, "value", kind)
        state = getattr(state, "value", state)
        out.append(Managed(str(name), str(kind), int(pid) if pid else None, str(state) if state else None))
    return out


@dataclass(frozen=True)
class Holder:
    """One process on one GPU."""

    gpu_index: int
    pid: int
    used_memory: int | None
    job: str | None  # managed process name, None when unmanaged
    kind: str | None
    user: str | None = None
    command: str | None = None
    na: str | None = None  # why user/command are missing


@dataclass(frozen=True)
class JobUsage:
    name: str
    kind: str
    state: str | None
    pids: tuple[int, ...]
    gpus: tuple[int, ...]
    mem_by_gpu: tuple[tuple[int, int | None], ...]
    summary: str


@dataclass(frozen=True)
class Attribution:
    t: float
    holders: tuple[Holder, ...] = ()
    jobs: tuple[JobUsage, ...] = ()
    by_gpu: Mapping[int, tuple[str, ...]] = field(default_factory=dict)

    def jobs_on(self, gpu: int) -> tuple[str, ...]:
        return self.by_gpu.get(gpu, ())

    def unmanaged(self) -> tuple[Holder, ...]:
        return tuple(h for h in self.holders if h.job is None)

    def on_gpu(self, gpu: int) -> tuple[Holder, ...]:
        return tuple(h for h in self.holders if h.gpu_index == gpu)

    def who(self, gpu: int) -> str:
        jobs = self.jobs_on(gpu)
        others = [h for h in self.on_gpu(gpu) if h.job is None]
        parts = list(jobs)
        for h in others:
            who = h.user or "?"
            parts.append(f"pid {h.pid} ({who})")
        return ", ".join(parts) if parts else "no processes"


def format_gpus(gpus: Sequence[int]) -> str:
    """``[0,1,2,3,5]`` -> ``"GPUs 0-3, 5"``; one GPU -> ``"GPU 3"``."""
    g = sorted(set(gpus))
    if not g:
        return "no GPU"
    runs: list[str] = []
    start = prev = g[0]
    for x in g[1:] + [None]:  # type: ignore[list-item]
        if x is not None and x == prev + 1:
            prev = x
            continue
        runs.append(f"{start}-{prev}" if prev > start else f"{start}")
        if x is not None:
            start = prev = x
    return ("GPU " if len(g) == 1 else "GPUs ") + ", ".join(runs)


def _mem_text(mems: Sequence[int | None]) -> str:
    if not mems:
        return ""
    if any(m is None for m in mems):
        return "memory N/A"
    gib = [m / GIB for m in mems]  # type: ignore[operator]
    lo, hi = min(gib), max(gib)
    if len(gib) == 1:
        return f"{lo:.1f} GiB"
    if hi - lo <= max(0.05, 0.02 * hi):
        return f"{hi:.1f} GiB each"
    return f"{lo:.1f}-{hi:.1f} GiB per GPU"


def summarise(name: str, kind: str, gpus: Sequence[int], mems: Sequence[int | None]) -> str:
    label = KIND_LABELS.get(kind, kind)
    verb = "holds" if kind == "server" else "on"
    mt = _mem_text(mems)
    return f"{label} {name} {verb} {format_gpus(gpus)}" + (f", {mt}" if mt else "")


# -- process trees -----------------------------------------------------


def _ppid_map_proc() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # the command sits in parentheses and may contain spaces: split after the last ')'
        rest = data[data.rfind(b")") + 2 :].split()
        if len(rest) > 1:
            out[int(entry.name)] = int(rest[1])
    return out


def ppid_map() -> dict[int, int]:
    """pid -> parent pid for every visible process."""
    if os.path.isdir("/proc/self"):
        return _ppid_map_proc()
    if psutil is None:  # pragma: no cover
        return {}
    out = {}
    for p in psutil.process_iter(["ppid"]):
        ppid = p.info.get("ppid")
        if ppid is not None:
            out[p.pid] = ppid
    return out


def descendants_from(parents: Mapping[int, int], roots: Iterable[int]) -> dict[int, int]:
    """Map every pid in the trees under ``roots`` (roots included) to its root."""
    children: dict[int, list[int]] = defaultdict(list)
    for pid, ppid in parents.items():
        children[ppid].append(pid)
    owner: dict[int, int] = {}
    for root in roots:
        stack = [root]
        while stack:
            p = stack.pop()
            if p in owner:
                continue
            owner[p] = root
            stack.extend(children.get(p, ()))
    return owner


def describe_pid(pid: int) -> tuple[str | None, str | None, str | None]:
    """(user, command, why missing) for a pid, never raising."""
    if psutil is not None:
        try:
            p = psutil.Process(pid)
            with p.oneshot():
                user = None
                try:
                    user = p.username()
                except (psutil.AccessDenied, KeyError):
                    pass
                try:
                    cmd = " ".join(p.cmdline()) or p.name()
                except psutil.AccessDenied:
                    cmd = p.name()
            return user, cmd, None
        except psutil.NoSuchProcess:
            return None, None, "not visible from here (ended, or in another pid namespace)"
        except psutil.AccessDenied:
            return None, None, "access denied"
    try:  # pragma: no cover - bare machines without psutil
        import pwd

        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        uid = os.stat(f"/proc/{pid}").st_uid
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)
        return user, cmd or None, None
    except FileNotFoundError:
        return None, None, "not visible from here (ended, or in another pid namespace)"
    except PermissionError:
        return None, None, "access denied"


# -- the join ----------------------------------------------------------


def attribute(
    gpu_processes: Iterable[GpuProcess],
    managed: Iterable[Any],
    *,
    parents: Mapping[int, int] | None = None,
    describe: Callable[[int], tuple[str | None, str | None, str | None]] = describe_pid,
    now: float | None = None,
) -> Attribution:
    """Join GPU processes with managed process trees.

    ``parents`` (pid -> ppid) defaults to a fresh scan of the process table;
    tests may pass their own.  ``describe`` gives user and command of
    processes we do not manage.
    """
    procs = list(gpu_processes)
    mgd = coerce_managed(managed)
    roots = {m.pid: m for m in mgd if m.pid}
    owner: dict[int, int] = {}
    if roots and procs:
        gpu_pids = {p.pid for p in procs}
        if gpu_pids - roots.keys():  # only walk the trees when a GPU pid is not a root itself
            owner = descendants_from(ppid_map() if parents is None else parents, roots)
        owner.update({r: r for r in roots})
    holders: list[Holder] = []
    job_mem: dict[str, dict[int, int | None]] = defaultdict(dict)
    job_pids: dict[str, set[int]] = defaultdict(set)
    by_gpu: dict[int, list[str]] = defaultdict(list)
    described: dict[int, tuple[str | None, str | None, str | None]] = {}
    for p in procs:
        root = owner.get(p.pid)
        m = roots.get(root) if root is not None else None
        if m is not None:
            holders.append(Holder(p.gpu_index, p.pid, p.used_memory, m.name, m.kind))
            cur = job_mem[m.name]
            if p.gpu_index in cur and cur[p.gpu_index] is not None and p.used_memory is not None:
                cur[p.gpu_index] = cur[p.gpu_index] + p.used_memory  # type: ignore[operator]
            elif p.gpu_index in cur:
                cur[p.gpu_index] = None
            else:
                cur[p.gpu_index] = p.used_memory
            job_pids[m.name].add(p.pid)
            if m.name not in by_gpu[p.gpu_index]:
                by_gpu[p.gpu_index].append(m.name)
        else:
            if p.pid not in described:
                described[p.pid] = describe(p.pid)
            user, cmd, why = described[p.pid]
            holders.append(Holder(p.gpu_index, p.pid, p.used_memory, None, None, user, cmd, why))
    jobs = []
    for m in mgd:  # one usage per job, with its first (current) entry's state
        if m.name not in job_mem or any(j.name == m.name for j in jobs):
            continue
        mem = job_mem[m.name]
        gpus = tuple(sorted(mem))
        mems = [mem[g] for g in gpus]
        jobs.append(
            JobUsage(
                name=m.name,
                kind=m.kind,
                state=m.state,
                pids=tuple(sorted(job_pids[m.name])),
                gpus=gpus,
                mem_by_gpu=tuple((g, mem[g]) for g in gpus),
                summary=summarise(m.name, m.kind, gpus, mems),
            )
        )
    return Attribution(
        t=time.time() if now is None else now,
        holders=tuple(holders),
        jobs=tuple(jobs),
        by_gpu={g: tuple(v) for g, v in by_gpu.items()},
    )


class LeftJobs:
    """The processes that left the managed list, kept as their job's while the GPUs list them.

    A relaunched server's old pid (stopped, or ended while a pass read the GPUs) still holds the server's
    memory while the GPUs list it, as a real server does for seconds while it lets go of CUDA: it stays the
    job's, not someone else's, until the GPUs no longer list it or for at most ``keep_s`` (past that, what
    still holds memory is shown as it is: a process nobody manages).
    """

    def __init__(self) -> None:
        self.last: list[Managed] = []  # the managed list of the last join that read one
        self._gone: dict[int, tuple[Managed, float]] = {}  # pid -> (its entry, monotonic time it left)

    def update(self, managed: list[Managed] | None, on_gpus: set[int], now: float,
               keep_s: float) -> tuple[list[Managed], list[Managed]]:
        """(the managed list to join: ``managed``, or the last one read when it could not be read (None),
        the processes that left it and still count as their job's)."""
        if managed is None:
            managed = list(self.last)
        now_pids = {m.pid for m in managed if m.pid}
        for m in self.last:
            if m.pid and m.pid not in now_pids:
                self._gone.setdefault(m.pid, (m, now))
        for pid, (_, since) in list(self._gone.items()):
            if pid in now_pids or pid not in on_gpus or now - since > keep_s:
                del self._gone[pid]
        self.last = managed
        return managed, [m for m, _ in self._gone.values()]


def free_memory_by_gpu(snap: Any, exclude: str | None = None) -> list[tuple[int, int, int]] | None:
    """(index, total bytes, free bytes) per readable GPU of a telemetry snapshot.

    None when there is no snapshot or no GPU (no driver).  Memory held by the
    managed job ``exclude`` (a server about to be relaunched) counts as free.
    """
    if snap is None or not snap.gpus:
        return None
    held: dict[int, int] = {}
    if exclude is not None and snap.attribution is not None:
        for job in snap.attribution.jobs:
            if job.name == exclude:
                for gpu, mem in job.mem_by_gpu:
                    held[gpu] = held.get(gpu, 0) + (mem or 0)
    out = []
    for g in snap.gpus:
        if g.lost or g.mem_total is None:
            continue
        used = (g.mem_used or 0) - held.get(g.index, 0)
        out.append((g.index, g.mem_total, g.mem_total - max(0, used)))
    return out


def probe_free_memory(sampler: Any, exclude: str | None = None) -> list[tuple[int, int, int]] | None:
    """Free memory per GPU for preflight, from a telemetry ``sampler``.

    Without ``exclude`` the latest snapshot serves.  With it (a server about
    to be relaunched, whose memory counts as free) the GPUs are read now,
    process list included: the sampler reads that list only every few
    seconds, and right after a relaunch the latest one still names the
    server's previous pid, which no managed process owns any more, so its
    memory would read as someone else's.  Memory and processes then come
    from the same pass, joined with the managed processes as they are now.
    """
    if sampler is None:
        return None
    if exclude is None:
        return free_memory_by_gpu(sampler.latest())
    want = getattr(getattr(sampler, "adapter", None), "want_processes", None)
    if want is not None:
        want()
    return free_memory_by_gpu(sampler.sample_once(), exclude)
