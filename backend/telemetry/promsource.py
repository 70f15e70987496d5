"""Every node's GPUs and every server's SGLang gauges, read through Prometheus.

One read is two requests: ``last_over_time({__name__=~"<names>"}[<max_age_s>s])`` (the newest
value of every series Specdeck knows that has a sample in the last ``max_age_s``; unlike other
functions ``last_over_time`` keeps the metric name) and ``/api/v1/targets`` (each target's health,
last error and last scrape, which give each node its age).  :func:`build_nodes` turns them into
:class:`NodeSnapshot` records holding the local sampler's :class:`GpuSample`, with the same rules:

- a field no series gives is ``None`` with its reason (not exported by this exporter, no reading
  in the last ``max_age_s``, the exporter reported NaN), never 0;
- a series older than ``max_age_s`` is N/A with its age (the source remembers when each field
  was last read, so the reason says how old it is);
- a GPU or a node seen before and missing now stays listed, every field N/A with its age, until
  ``forget_s`` has passed.

:class:`PromSource` reads in a background thread every ``interval_s``; pages read
:meth:`PromSource.latest` and never wait on Prometheus.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from backend.telemetry.model import (
    GPU_SERIES,
    GpuProcess,
    NodeSnapshot,
    PromSnapshot,
    RemoteHolder,
    Series,
    ServerMetrics,
    gpu_sample,
)
from backend.telemetry.promnames import (
    BY_METRIC,
    GPU_FIELDS,
    NVITOP_PROC_MEM,
    SGLANG,
    SGLANG_FIELDS,
    SGLANG_SUMMED,
    SPECDECK_INFO,
    SPECDECK_JOB,
    WORKLOAD_LABELS,
    MIB,
    gpu_index_of,
    metrics_regex,
    node_name,
    node_of,
)
from backend.telemetry.promql import PromClient, PromError, PromSeries, Target
from backend.telemetry.ring import Ring

log = logging.getLogger(__name__)

FAMILY_NAMES = {"dcgm": "DCGM exporter", "nvitop": "nvitop-exporter", "specdeck": "Specdeck's exporter"}


def _age_text(age: float) -> str:
    if age < 90:
        return f"{age:.0f} s"
    if age < 5400:
        return f"{age / 60:.0f} min"
    return f"{age / 3600:.1f} h"


@dataclass
class Memory:
    """What a source remembers between reads: when each field of each GPU was last read, and
    each GPU's identity, so a reading that went missing is N/A *with its age*."""

    seen: dict[tuple[str, int, str], float] = field(default_factory=dict)  # (node, gpu, field) -> t
    ident: dict[tuple[str, int], dict] = field(default_factory=dict)  # (node, gpu) -> uuid/name/bus/t
    nodes: dict[str, float] = field(default_factory=dict)  # node -> last time it had a reading
    up_at: dict[str, float] = field(default_factory=dict)  # scrape URL -> last scrape while healthy
    urls: dict[tuple[str, str], float] = field(default_factory=dict)  # (node, scrape URL) -> last seen

    def forget(self, now: float, after_s: float) -> None:
        cut = now - after_s
        for d in (self.seen, self.ident, self.nodes, self.up_at, self.urls):
            for k in [k for k, v in d.items() if (v["t"] if isinstance(v, dict) else v) < cut]:
                del d[k]


def _target_key(labels) -> tuple[str, str]:
    return (str(labels.get("job", "")), str(labels.get("instance", "")))


def _coerce_managed(items: Iterable[Any]) -> list[tuple[str, str, int | None, str | None, tuple[int, ...] | None]]:
    """(name, kind, pid, node, gpus) of each managed process; ``node`` and ``gpus`` are read where
    the record has them (a job placed on a node), else None."""
    out = []
    for m in items:
        if isinstance(m, (tuple, list)):
            name, kind, pid = m[0], m[1], m[2]
            node = m[3] if len(m) > 3 else None
            gpus = m[4] if len(m) > 4 else None
        else:
            name, kind, pid = m.name, m.kind, getattr(m, "pid", None)
            node, gpus = getattr(m, "node", None), getattr(m, "gpus", None)
        kind = getattr(kind, "value", kind)
        out.append((str(name), str(kind), int(pid) if pid else None, str(node) if node else None,
                    tuple(int(g) for g in gpus) if gpus else None))
    return out


def build_nodes(
    series: list[PromSeries],
    targets: list[Target] | None,
    *,
    now: float,
    max_age_s: float,
    memory: Memory | None = None,
    managed: Iterable[Any] = (),
    local_node: str = "",
    forget_s: float = 3600.0,
) -> list[NodeSnapshot]:
    """Node snapshots from one read (pure but for ``memory``, which it updates).

    ``series``: the newest point of each series (a query answer, or an exporter's text through
    ``promnames.series_from_exposition``); ``targets``: the scrape targets (``None`` when they
    could not be read: ages are then unknown)."""
    mem = memory if memory is not None else Memory()
    by_target = {_target_key(t.labels): t for t in targets or ()}
    for t in targets or ():
        if t.health == "up" and t.last_scrape is not None:
            mem.up_at[t.scrape_url] = max(mem.up_at.get(t.scrape_url, 0.0), t.last_scrape)

    # values[(node, gpu)][family][field] = (value, t, why)
    values: dict[tuple[str, int], dict[str, dict[str, tuple[float | None, float, str | None]]]] = defaultdict(
        lambda: defaultdict(dict))
    ident: dict[tuple[str, int], dict] = {}
    node_targets: dict[str, set[str]] = defaultdict(set)
    node_families: dict[str, set[str]] = defaultdict(set)
    procs: dict[tuple[str, int], dict[int, dict]] = defaultdict(dict)
    jobs: dict[tuple[str, int], dict[int, tuple[str, str]]] = defaultdict(dict)
    workloads: dict[tuple[str, int], set[str]] = defaultdict(set)
    server_series: dict[tuple[str, str], list[PromSeries]] = defaultdict(list)

    for s in series:
        labels = s.labels
        name = s.name
        node = node_of(labels)
        tgt = by_target.get(_target_key(labels))
        if tgt is not None:
            node_targets[node].add(tgt.scrape_url)
        if name in SGLANG:
            server = str(labels.get("server") or labels.get("instance") or "?")
            server_series[(node, server)].append(s)
            continue
        if name == SPECDECK_INFO:
            node_families[node].add("specdeck")
            continue
        gpu = gpu_index_of(labels)
        if gpu is None:
            continue
        key = (node, gpu)
        last = s.last
        if last is None:
            continue
        t, v = last
        why = s.why.get(t)
        if name in BY_METRIC:
            fam, fld, scale = BY_METRIC[name]
            node_families[node].add(fam)
            values[key][fam][fld] = (None if v is None else v * scale, t, why)
            info = ident.setdefault(key, {})
            info.setdefault("uuid", labels.get("UUID") or labels.get("uuid"))
            info.setdefault("name", labels.get("modelName") or labels.get("devicename"))
            info.setdefault("bus_id", labels.get("pci_bus_id"))
            for wl in WORKLOAD_LABELS:
                if labels.get(wl) and wl in ("pod", "hpc_job"):
                    ns = labels.get("namespace")
                    text = (f"pod {ns}/{labels['pod']}" if ns else f"pod {labels['pod']}") if wl == "pod" \
                        else f"job {labels['hpc_job']}"
                    if labels.get("container"):
                        text += f" ({labels['container']})"
                    workloads[key].add(text)
        elif name == NVITOP_PROC_MEM:
            try:
                pid = int(labels.get("pid", ""))
            except ValueError:
                continue
            procs[key][pid] = {"user": labels.get("username") or None,
                               "mem": None if v is None else int(v * MIB)}
        elif name == SPECDECK_JOB:
            try:
                pid = int(labels.get("pid", ""))
            except ValueError:
                continue
            jobs[key][pid] = (str(labels.get("managed_job", "")), str(labels.get("managed_kind", "")))

    # which GPUs to show: those read now and those remembered
    keys = set(values) | {k for k, v in mem.ident.items() if now - v["t"] < forget_s}
    nodes_now: dict[str, list[int]] = defaultdict(list)
    for node, gpu in keys:
        nodes_now[node].append(gpu)
    for node in list(node_families) + [n for n, _ in server_series]:
        nodes_now.setdefault(node, [])
    for node, t in mem.nodes.items():
        if now - t < forget_s:
            nodes_now.setdefault(node, [])
    # a target Specdeck wrote, or one that is down, stands for its node even before any reading
    known = {u for urls in node_targets.values() for u in urls} | {u for (_n, u) in mem.urls}
    for t in targets or ():
        if t.scrape_url not in known and (t.health != "up" or t.labels.get("specdeck_kind")):
            nodes_now.setdefault(node_of(t.labels), [])

    managed_list = _coerce_managed(managed)
    out: list[NodeSnapshot] = []
    for node in sorted(nodes_now, key=lambda n: (n != local_node, n)):
        for u in node_targets.get(node, ()):
            mem.urls[(node, u)] = now
        urls = sorted(node_targets.get(node, set()) | {u for (n, u) in mem.urls if n == node}
                      | {t.scrape_url for t in targets or () if node_of(t.labels) == node and t.scrape_url not in known})
        tg = [t for t in targets or () if t.scrape_url in urls]
        health, age, problem = _node_health(node, tg, targets is not None, mem, now, max_age_s)
        gpus = []
        for gpu in sorted(nodes_now[node]):
            key = (node, gpu)
            fams = values.get(key, {})
            info = ident.get(key) or mem.ident.get(key) or {}
            if key in ident:
                mem.ident[key] = {**ident[key], "t": now}
            fields: dict[str, Any] = {"index": gpu, "t": now, "uuid": info.get("uuid"), "name": info.get("name"),
                                      "bus_id": info.get("bus_id"), "lost": False}
            na: dict[str, str] = {}
            fam_order = [f for f in ("dcgm", "nvitop") if f in fams]
            for fld in GPU_FIELDS:
                val, why = _field(fams, fam_order, fld)
                if val is not None:
                    fields[fld] = val
                    mem.seen[(node, gpu, fld)] = now
                    continue
                fields[fld] = None
                na[fld] = why or _missing(node, gpu, fld, fam_order, mem, now, max_age_s, problem)
            fields.update({"throttle": None, "mig_enabled": None, "mig_devices": (), "slow": None})
            na.setdefault("throttle", "not read through Prometheus")
            plist = procs.get(key)
            if plist is not None or "nvitop" in fam_order:
                fields["processes"] = tuple(GpuProcess(gpu, pid, p["mem"]) for pid, p in sorted((plist or {}).items()))
                fields["processes_t"] = now
            else:
                fields["processes"] = None
                fields["processes_t"] = None
                na["processes"] = ("DCGM exporter lists no processes" if fam_order == ["dcgm"]
                                   else "no exporter on this node lists GPU processes")
            fields["na"] = na
            gpus.append(gpu_sample(fields))
        if any(k[0] == node for k in values) or node_families.get(node):
            mem.nodes[node] = now
        holders = _holders(node, gpus, procs, jobs, workloads, managed_list)
        servers = tuple(_server(node, server, ss, by_target, now)
                        for (n, server), ss in sorted(server_series.items()) if n == node)
        out.append(NodeSnapshot(
            node=node, t=now, gpus=tuple(gpus), sources=tuple(sorted(node_families.get(node, ()))),
            age_s=age, health=health, problem=problem, holders=holders, servers=servers, targets=tuple(urls),
            is_local=bool(local_node) and node == local_node,
        ))
    mem.forget(now, forget_s)
    return out


def _field(fams, order, fld) -> tuple[float | None, str | None]:
    """The value of ``fld`` from the first exporter that has it (DCGM before nvitop); memory total
    from DCGM is used + free (+ reserved)."""
    why = None
    for fam in order:
        got = fams[fam]
        if fld == "mem_total" and fam == "dcgm":
            used, free = got.get("mem_used"), got.get("mem_free")
            if used and free and used[0] is not None and free[0] is not None:
                res = got.get("mem_reserved")
                return used[0] + free[0] + (res[0] if res and res[0] is not None else 0.0), None
            continue
        if fld in got:
            v, _t, reason = got[fld]
            if v is not None:
                return v, None
            why = why or reason
    return None, why


def _missing(node, gpu, fld, fams, mem: Memory, now, max_age_s, problem) -> str:
    last = mem.seen.get((node, gpu, fld))
    if last is not None:
        age = now - last
        older = f" (older than max_age_s {max_age_s:g} s)" if age > max_age_s else ", missing from the last read"
        return f"last reading {_age_text(age)} old{older}" + (f"; {problem}" if problem else "")
    if fams:
        names = " and ".join(FAMILY_NAMES[f] for f in fams)
        return f"not exported by {names} on {node}"
    return problem or f"no reading in the last {max_age_s:g} s"


def _node_health(node, tg: list[Target], have_targets: bool, mem: Memory, now: float, max_age_s: float
                 ) -> tuple[str, float | None, str | None]:
    if not have_targets:
        return "unknown", None, "Prometheus's targets could not be read: the readings' age is unknown"
    if not tg:
        last = mem.nodes.get(node)
        if last is not None and now - last > max_age_s:
            return "gone", now - last, f"no target of this node is scraped any more; last reading {_age_text(now - last)} ago"
        return "unknown", None, None
    ups = [t for t in tg if t.health == "up" and t.last_scrape is not None]
    if ups:
        age = max(0.0, now - max(t.last_scrape for t in ups))  # type: ignore[type-var]
        down = [t for t in tg if t.health != "up"]
        if age > max_age_s:
            return "stale", age, f"last scraped {_age_text(age)} ago (older than max_age_s {max_age_s:g} s)"
        if down:
            return "up", age, "; ".join(f"{t.scrape_url} is down: {t.last_error or t.health}" for t in down)
        return "up", age, None
    last_up = max((mem.up_at.get(t.scrape_url, 0.0) for t in tg), default=0.0) or None
    errs = "; ".join(f"{t.scrape_url}: {t.last_error or 'not scraped yet'}" for t in tg)
    age = None if last_up is None else max(0.0, now - last_up)
    return "down", age, f"target down ({errs})" + (f"; last good scrape {_age_text(age)} ago" if age is not None else "")


def _holders(node, gpus, procs, jobs, workloads, managed) -> tuple[RemoteHolder, ...]:
    out: list[RemoteHolder] = []
    by_pid = {pid: (name, kind) for name, kind, pid, mnode, _g in managed if pid and mnode == node}
    for g in gpus:
        key = (node, g.index)
        for pid, p in sorted(procs.get(key, {}).items()):
            job, kind, how = None, None, "exporter"
            if pid in jobs.get(key, {}):
                job, kind = jobs[key][pid]
                how = "exporter"
            elif pid in by_pid:
                job, kind = by_pid[pid]
                how = "pid"
            out.append(RemoteHolder(g.index, pid, p["user"], p["mem"], job or None, kind or None, None, how))
        for pid, (job, kind) in sorted(jobs.get(key, {}).items()):
            if pid not in procs.get(key, {}):
                out.append(RemoteHolder(g.index, pid, None, None, job or None, kind or None, None, "exporter"))
        for wl in sorted(workloads.get(key, ())):
            out.append(RemoteHolder(g.index, workload=wl, how="exporter"))
        for name, kind, _pid, mnode, mg in managed:
            if mnode == node and mg and g.index in mg and not any(h.job == name and h.gpu_index == g.index for h in out):
                out.append(RemoteHolder(g.index, job=name, kind=kind, how="placement"))
    return tuple(out)


def _server(node: str, server: str, ss: list[PromSeries], by_target, now: float) -> ServerMetrics:
    vals: dict[str, list[float]] = defaultdict(list)
    why: dict[str, str] = {}
    model = None
    instance = ""
    health, age = "unknown", None
    for s in ss:
        if s.labels.get("tp_rank") not in (None, "0") or s.labels.get("pp_rank") not in (None, "0"):
            continue
        fld = SGLANG[s.name]
        model = model or s.labels.get("model_name")
        instance = instance or str(s.labels.get("instance", ""))
        tgt = by_target.get(_target_key(s.labels))
        if tgt is not None:
            health = tgt.health
            if tgt.last_scrape is not None:
                age = max(0.0, now - tgt.last_scrape)
        last = s.last
        if last is None:
            continue
        if last[1] is None:
            why[fld] = s.why.get(last[0], "no value")
        else:
            vals[fld].append(last[1])
    fields: dict[str, Any] = {}
    na = {}
    for fld in SGLANG_FIELDS:
        got = vals.get(fld)
        if got:
            fields[fld] = sum(got) if fld in SGLANG_SUMMED else sum(got) / len(got)
        else:
            fields[fld] = None
            na[fld] = why.get(fld) or "not exported by this server (older SGLang, or speculation off)"
    return ServerMetrics(name=server, node=node, instance=instance, model_name=model, age_s=age, health=health,
                         na=na, **fields)


class PromSource:
    """Reads every node through Prometheus in a background thread (see the module's text).

    ``managed``: the managed processes (the supervisor's views), for attribution across nodes;
    ``clock``: wall clock (tests pass a fake)."""

    def __init__(self, client: PromClient, *, max_age_s: float = 30.0, interval_s: float = 2.0,
                 managed: Callable[[], Iterable[Any]] | None = None, local_node: str | None = None,
                 clock: Callable[[], float] = time.time, ring_s: float = 3600.0,
                 backfill_s: float = 900.0, backfill_step_s: float = 15.0):
        self.client = client
        self.max_age_s = max_age_s
        self.interval_s = interval_s
        self.local_node = local_node if local_node is not None else node_name()
        self._managed = managed
        self._clock = clock
        self._memory = Memory()
        self._latest: PromSnapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # every remote GPU's readings as this source read them: the GPUs page's history of other nodes
        self._capacity = max(2, int(ring_s / interval_s) + 1)
        self._rings: dict[tuple[str, int], Ring] = {}
        self._ring_lock = threading.Lock()
        self.backfill_s = backfill_s  # history read once with query_range at the first read (0: none)
        self.backfill_step_s = backfill_step_s
        self._backfilled = backfill_s <= 0

    @property
    def url(self) -> str:
        return self.client.url

    def query_expr(self) -> str:
        return f'last_over_time({{__name__=~"{metrics_regex()}"}}[{self.max_age_s:g}s])'

    def read_once(self) -> PromSnapshot:
        """One read (both requests), kept as :meth:`latest`; a failure keeps the last nodes, aged,
        with the error."""
        with self._lock:
            t0 = time.perf_counter()
            now = self._clock()
            managed: list = []
            if self._managed is not None:
                try:
                    managed = list(self._managed())
                except Exception:  # noqa: BLE001 - the provider belongs to someone else
                    log.exception("managed process list failed")
            try:
                series = self.client.query(self.query_expr())
            except PromError as exc:
                snap = self._failed(now, str(exc), t0)
                self._latest = snap
                return snap
            try:
                targets: list[Target] | None = self.client.targets()
            except PromError as exc:
                log.warning("reading Prometheus's targets failed: %s", exc)
                targets = None
            nodes = build_nodes(series, targets, now=now, max_age_s=self.max_age_s, memory=self._memory,
                                managed=managed, local_node=self.local_node)
            snap = PromSnapshot(t=now, url=self.client.url, nodes=tuple(nodes), error=None,
                                query_ms=(time.perf_counter() - t0) * 1000.0, local_node=self.local_node)
            if not self._backfilled:
                self._backfilled = True
                self._backfill(now)
            self._record(snap)
            self._latest = snap
            return snap

    def _backfill(self, now: float) -> None:
        """The last ``backfill_s`` of every GPU field, one ``query_range`` at ``backfill_step_s``, into
        the history rings before the first live reading: a dashboard started late still has history."""
        names = "|".join(BY_METRIC)
        expr = f'last_over_time({{__name__=~"{names}"}}[{self.max_age_s:g}s])'
        step = max(self.backfill_step_s, self.interval_s)
        try:
            series = self.client.query_range(expr, now - self.backfill_s, now - step, step)
        except PromError as exc:
            log.warning("reading the last %g s of history from Prometheus failed: %s", self.backfill_s, exc)
            return
        # (node, gpu) -> t -> family -> field -> value
        rows: dict[tuple[str, int], dict[float, dict[str, dict[str, float]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(dict)))
        for ser in series:
            gpu = gpu_index_of(ser.labels)
            if gpu is None or ser.name not in BY_METRIC:
                continue
            fam, fld, scale = BY_METRIC[ser.name]
            key = (node_of(ser.labels), gpu)
            for t, v in ser.points:
                row = rows[key][t]  # a time with no value stays in the ring as a gap
                if v is not None:
                    row[fam][fld] = v * scale
        with self._ring_lock:
            for key, by_t in rows.items():
                ring = self._rings.get(key)
                if ring is None:
                    ring = self._rings[key] = Ring(self._capacity, GPU_SERIES)
                for t in sorted(by_t):
                    fams = {f: {k: (v, t, None) for k, v in d.items()} for f, d in by_t[t].items()}
                    order = [f for f in ("dcgm", "nvitop") if f in fams]
                    ring.append(t, {f: _field(fams, order, f)[0] for f in GPU_SERIES})

    def _record(self, snap: PromSnapshot) -> None:
        with self._ring_lock:
            for n in snap.nodes:
                for g in n.gpus:
                    ring = self._rings.get((n.node, g.index))
                    if ring is None:
                        ring = self._rings[(n.node, g.index)] = Ring(self._capacity, GPU_SERIES)
                    ring.append(snap.t, {f: getattr(g, f) for f in GPU_SERIES})

    def history(self, node: str, gpu: int, field: str, since: float, until: float | None = None) -> Series:
        """One remote GPU's trace as this source read it (every ``interval_s``, the last ``ring_s``);
        an N/A reading is a gap."""
        with self._ring_lock:
            ring = self._rings.get((node, gpu))
            ts, vs = ring.read(field, since, until) if ring is not None and field in ring.cols else ([], [])
        return Series(field, gpu, tuple(ts), tuple(vs), tuple(vs), tuple(vs), self.interval_s)

    def _failed(self, now: float, error: str, t0: float) -> PromSnapshot:
        nodes = build_nodes([], None, now=now, max_age_s=self.max_age_s, memory=self._memory,
                            local_node=self.local_node)
        nodes = [NodeSnapshot(node=n.node, t=now, gpus=n.gpus, sources=n.sources, age_s=n.age_s, health="unknown",
                              problem=f"Prometheus gave no answer: {error}", holders=n.holders, servers=(),
                              targets=n.targets, is_local=n.is_local) for n in nodes]
        return PromSnapshot(t=now, url=self.client.url, nodes=tuple(nodes), error=error,
                            query_ms=(time.perf_counter() - t0) * 1000.0, local_node=self.local_node)

    def latest(self) -> PromSnapshot | None:
        return self._latest

    def start(self) -> "PromSource":
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="telemetry-prometheus", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.read_once()
            except Exception:  # noqa: BLE001 - keep reading
                log.exception("reading Prometheus failed")
            self._stop.wait(self.interval_s)
