"""Prometheus targets for what Specdeck runs: a ``file_sd`` JSON file, and Ray's own.

Prometheus reads a ``file_sd_configs`` file again whenever it changes (about 3 s here).  Specdeck
writes ``[telemetry.prometheus] targets_file`` (relative to the workspace) with one entry per
server it runs that exports metrics (its ``host:port``; labels ``server``, ``workspace``, ``node``,
``specdeck_kind = "sglang"``) and one for its own exporter (``export``; ``specdeck_kind = "gpu"``).
The file is replaced atomically (a temporary file in the same folder, then ``os.replace``), and only
when its content changes.  A Prometheus job that reads it::

    scrape_configs:
      - job_name: specdeck
        file_sd_configs: [{files: ["/path/to/workspace/run/prometheus-targets.json"]}]

A Ray head writes ``<temp dir>/prom_metrics_service_discovery.json`` in the same format;
:func:`read_file_sd` reads either (and names the file and the entry of a malformed one), and
:func:`targets_view` puts Specdeck's and Ray's side by side for a page or the command line.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from backend.telemetry.promnames import node_name

log = logging.getLogger(__name__)

RAY_SD_FILE = "prom_metrics_service_discovery.json"
LIVE_STATES = frozenset({"STARTING", "RUNNING", "STOPPING", "BACKOFF"})


class TargetsFileError(ValueError):
    """A file_sd file that is not a list of ``{"targets": [...], "labels": {...}}``."""


@dataclass(frozen=True)
class TargetGroup:
    targets: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    origin: str  # "specdeck" or "ray"

    def as_json(self) -> dict[str, Any]:
        return {"targets": list(self.targets), "labels": dict(self.labels)}


def _node() -> str:
    return node_name()


def _reachable(host: str, node: str) -> str:
    """The host part Prometheus should scrape: a wildcard bind is reached by the node's name."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        return node
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def server_groups(servers: Iterable[Any], views: dict[str, Any], *, workspace: str, node: str) -> list[TargetGroup]:
    """One group per server config (``name``, ``host``, ``port``, ``enable_metrics``) whose
    process is live (``views``: name -> supervisor view); a view that knows its node (a job placed
    on another node) names it, else this node."""
    out = []
    for cfg in servers:
        if not getattr(cfg, "enable_metrics", True):
            continue
        view = views.get(cfg.name)
        state = getattr(getattr(view, "state", None), "value", getattr(view, "state", None))
        if view is None or state not in LIVE_STATES:
            continue
        where = str(getattr(view, "node", None) or node)
        host = str(getattr(view, "host", None) or cfg.host)
        labels = (("node", where), ("server", cfg.name), ("specdeck_kind", "sglang"), ("workspace", workspace))
        out.append(TargetGroup((f"{_reachable(host, where)}:{int(cfg.port)}",), labels, "specdeck"))
    return out


def exporter_group(address: str | None, *, workspace: str, node: str) -> list[TargetGroup]:
    if not address:
        return []
    host, _, port = address.rpartition(":")
    labels = (("node", node), ("specdeck_kind", "gpu"), ("workspace", workspace))
    return [TargetGroup((f"{_reachable(host.strip('[]'), node)}:{port}",), labels, "specdeck")]


def render(groups: Iterable[TargetGroup]) -> str:
    return json.dumps([g.as_json() for g in groups], indent=2, sort_keys=True) + "\n"


def write_file_sd(path: Path, groups: Iterable[TargetGroup]) -> bool:
    """Write ``groups`` to ``path`` atomically; False (and nothing written) when it already holds
    them.  The file is readable by others (0644): Prometheus often runs as its own user."""
    text = render(groups)
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True


def read_file_sd(path: Path, origin: str = "ray") -> list[TargetGroup]:
    """A file_sd JSON file's groups; :class:`TargetsFileError` names the file and the entry."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TargetsFileError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise TargetsFileError(f"{path}:{getattr(exc, 'lineno', '?')}: not JSON: {exc}") from None
    if not isinstance(doc, list):
        raise TargetsFileError(f"{path}: expected a list of target groups, got {type(doc).__name__}")
    out = []
    for i, g in enumerate(doc):
        if not isinstance(g, dict):
            raise TargetsFileError(f"{path}: [{i}]: expected an object with targets and labels")
        targets, labels = g.get("targets"), g.get("labels", {})
        if not isinstance(targets, list) or not all(isinstance(t, str) and t for t in targets):
            raise TargetsFileError(f"{path}: [{i}].targets: expected a list of \"host:port\" strings")
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TargetsFileError(f"{path}: [{i}].labels: expected an object of string labels")
        out.append(TargetGroup(tuple(targets), tuple(sorted(labels.items())), origin))
    return out


def ray_sd_path(root: Path) -> Path | None:
    """Ray's service discovery file of the workspace's local head (its temp dir), when there is one."""
    try:
        from backend.supervisor.raycluster import load_cluster  # noqa: PLC0415

        cluster = load_cluster(root)
        if cluster is None or not cluster.is_local:
            return None
        info = cluster.head_info() or {}
        temp = info.get("temp_dir") or str(cluster.temp_dir())
    except Exception:  # noqa: BLE001 - a cluster that cannot be read has no targets to add
        log.debug("no Ray cluster to read targets from", exc_info=True)
        return None
    return Path(temp) / RAY_SD_FILE


@dataclass(frozen=True)
class TargetsView:
    path: Path
    groups: tuple[TargetGroup, ...]
    ray_path: Path | None = None
    ray_error: str | None = None


class TargetsWriter:
    """Keeps a workspace's targets file in step with its live servers and its exporter.

    ``sync()`` is cheap (a stat and a compare; a write only on a change): the supervise loop calls
    it every poll, the dashboard's runtime from a small thread (:func:`start_for_runtime`)."""

    def __init__(self, workspace: Any, *, servers=None, views=None, exporter_address=None,
                 node: str | None = None):
        self.workspace = workspace
        self._servers = servers  # () -> server configs
        self._views = views  # () -> supervisor views
        self.exporter_address = exporter_address  # "HOST:PORT", or () -> it (None while not serving)
        self.node = node or _node()
        self.last_error: str | None = None
        self.latest: TargetsView | None = None  # the last view() the runtime's thread took
        self.ray_path: Path | None = None  # Ray's file_sd file; None: the workspace's local head's

    @property
    def path(self) -> Path | None:
        pcfg = getattr(getattr(self.workspace.config, "telemetry", None), "prometheus", None)
        if pcfg is None or not pcfg.targets_file:
            return None
        p = Path(pcfg.targets_file).expanduser()
        return p if p.is_absolute() else Path(self.workspace.root) / p

    def groups(self) -> list[TargetGroup]:
        name = str(getattr(self.workspace, "name", None) or Path(self.workspace.root).name)
        views = {v.name: v for v in (self._views() if self._views else [])}
        servers = list(self._servers()) if self._servers else []
        address = self.exporter_address() if callable(self.exporter_address) else self.exporter_address
        return server_groups(servers, views, workspace=name, node=self.node) + \
            exporter_group(address, workspace=name, node=self.node)

    def sync(self) -> bool:
        path = self.path
        if path is None:
            return False
        try:
            changed = write_file_sd(path, self.groups())
            self.last_error = None
            return changed
        except Exception as exc:  # noqa: BLE001 - reported, the loop goes on
            self.last_error = f"{path}: {exc}"
            log.warning("writing the Prometheus targets file failed: %s", self.last_error)
            return False

    def view(self) -> TargetsView:
        path = self.path or Path(self.workspace.root) / "run" / "prometheus-targets.json"
        ours: list[TargetGroup] = []
        if path.exists():
            try:
                ours = read_file_sd(path, "specdeck")
            except TargetsFileError as exc:
                self.last_error = str(exc)
        ray = self.ray_path if self.ray_path is not None else ray_sd_path(Path(self.workspace.root))
        ray_groups: list[TargetGroup] = []
        err = None
        if ray is not None and ray.exists():
            try:
                ray_groups = read_file_sd(ray, "ray")
            except TargetsFileError as exc:
                err = str(exc)
        return TargetsView(path, tuple(ours + ray_groups), ray, err)


def writer_for(workspace: Any, fleet: Any, supervisor: Any, telemetry: Any = None) -> TargetsWriter:
    """The writer for a workspace's fleet and supervisor (and its sampler's exporter, if any)."""
    def servers():
        out = []
        for n in fleet.names():
            try:
                out.append(fleet.config(n))
            except KeyError:  # removed by a config edit meanwhile
                continue
        return out

    def exporter_address() -> str | None:
        exporter = getattr(telemetry, "exporter", None)
        return exporter.address if exporter is not None and exporter.running else None

    return TargetsWriter(workspace, servers=servers, views=supervisor.views, exporter_address=exporter_address)


def start_for_runtime(rt: Any, interval_s: float = 2.0) -> TargetsWriter:
    """A daemon thread that keeps ``rt``'s targets file in step until ``rt._stop`` is set."""
    writer = writer_for(rt.workspace, rt.fleet, rt.supervisor, rt.telemetry)
    stop: threading.Event = rt._stop

    def loop() -> None:
        while True:
            try:
                writer.sync()
                writer.latest = writer.view()  # what the GPUs page lists, read here, never on its render
            except Exception:  # noqa: BLE001
                log.exception("keeping the Prometheus targets file failed")
            if stop.wait(interval_s):
                return

    threading.Thread(target=loop, name="specdeck-prom-targets", daemon=True).start()
    return writer


__all__ = ["RAY_SD_FILE", "TargetGroup", "TargetsFileError", "TargetsView", "TargetsWriter", "exporter_group",
           "read_file_sd", "render", "server_groups", "start_for_runtime", "write_file_sd", "writer_for"]
