"""Wiring ``[telemetry.prometheus]`` into a sampler: a :class:`PromSource` reading every node and an
:class:`Exporter` serving the sampler's snapshots (re-exported by ``backend.telemetry.sampler``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable


def attach_prometheus(sampler: Any, pcfg: Any, *, root: Path, config_path: Any,
                      managed: Callable[[], Iterable[Any]] | None = None, source: str = "auto",
                      node: str | None = None) -> None:
    """Give ``sampler`` what ``[telemetry.prometheus]`` asks for: a :class:`PromSource` reading
    every node from ``url`` and an :class:`Exporter` serving its snapshots on ``export``.  A
    problem (a bad URL or address, an unreadable token file) is kept in ``sampler.prom_problems``
    as ``path:line: key: why`` and that part is left off; the local sampler runs regardless.
    ``node``: this machine's node name (default ``promnames.node_name()``)."""
    from backend.telemetry.promexport import Exporter, SnapshotCollector, check_prometheus, config_problem  # noqa: PLC0415
    from backend.telemetry.promnames import node_name  # noqa: PLC0415
    from backend.telemetry.promql import PromClient  # noqa: PLC0415
    from backend.telemetry.promsource import PromSource  # noqa: PLC0415

    node = node or node_name()
    problems = check_prometheus(pcfg, config_path)
    sampler.prom_problems = list(problems)
    bad = {p.split(": telemetry.prometheus.", 1)[1].split(":", 1)[0] for p in problems if ": telemetry.prometheus." in p}
    if pcfg.url and not bad & {"url", "token_file"}:
        token = None
        if pcfg.token_file:
            tpath = Path(pcfg.token_file).expanduser()
            tpath = tpath if tpath.is_absolute() else root / tpath
            try:
                token = tpath.read_text(encoding="utf-8").strip() or None
            except OSError as e:
                sampler.prom_problems.append(config_problem(config_path, "token_file", f"{tpath}: {e.strerror or e}"))
        if token is not None or not pcfg.token_file:
            client = PromClient(pcfg.url, token=token, timeout_s=float(pcfg.query_timeout_s))
            sampler.prom = PromSource(client, max_age_s=float(pcfg.max_age_s),
                                      interval_s=max(2.0, sampler.interval_s), managed=managed, local_node=node)
    if pcfg.export and "export" not in bad:
        collector = SnapshotCollector(sampler.latest, hostname=node, source=source,
                                      stale_after_s=max(10.0, 3 * sampler.interval_s))
        sampler.exporter = Exporter(pcfg.export, collector)
