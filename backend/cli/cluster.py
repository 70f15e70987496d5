"""``cluster``: the workspace's Ray cluster: ``up``, ``down``, ``status [--json]``.

``up`` with ``[cluster] address = "local"`` starts the head Specdeck owns as the supervised process
``ray-head`` (free ports on 127.0.0.1, its own temp dir and HOME, ``RAY_AUTH_MODE`` set) and waits
until its dashboard answers; with a remote address it checks ``/api/version`` with the token.
``down`` ends only the head Specdeck started, by its pid (SIGTERM, grace, SIGKILL), never ``ray stop``.
``status`` gives the address, Ray's version, the nodes and their resources, and the jobs known.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any, TextIO

from backend.cli.session import SOURCE, CommandError, Session, actor

# The supervisor's Ray modules come with the session a command opens; each command imports what it
# names of them, so --help does not load them.
if TYPE_CHECKING:
    from backend.supervisor.raycluster import Cluster

UP_TIMEOUT_S = 120.0


def _cluster(s: Session) -> Cluster:
    from backend.supervisor.raycluster import ClusterError, load_cluster

    try:
        cluster = load_cluster(s.ws.root)
    except ClusterError as exc:
        raise CommandError(str(exc)) from None
    if cluster is None:
        raise CommandError(f"{s.ws.config_path}: no [cluster] section (add kind = \"ray\" and address = \"local\" "
                           "or \"http://HOST:8265\" with token_file)")
    return cluster


def _version(cluster: Cluster) -> dict[str, Any] | None:
    from backend.supervisor.raycluster import ClusterError

    try:
        return cluster.check()
    except ClusterError:
        return None


def cmd_up(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.supervisor.raycluster import HEAD_NAME, ClusterError
    from specdeck_types.process import ProcState

    cluster = _cluster(s)
    if not cluster.is_local:
        try:
            v = cluster.check()
        except ClusterError as exc:
            raise CommandError(f"the cluster at {cluster.config.address} does not answer as it should: {exc}") from None
        out.write(f"cluster at {cluster.config.address}: Ray {v.get('ray_version')} answers with the token\n")
        return 0
    view = s.sup.view(HEAD_NAME)
    if view is not None and view.live:
        v = _version(cluster)
        if v is not None:
            out.write(f"the local head is already up: {cluster.address()} (Ray {v.get('ray_version')}, "
                      f"pid {view.pid})\n")
            return 0
        if view.state == ProcState.RUNNING:
            raise CommandError(f"{HEAD_NAME} runs (pid {view.pid}) but its dashboard does not answer; "
                               "run `cluster down`, then `cluster up`")
    else:
        _start_head(s, cluster)
    deadline = time.monotonic() + args.timeout
    retried = False
    while True:
        s.sup.poll(sync_probes=True)
        view = s.sup.view(HEAD_NAME)
        if view is None or not view.live:
            why = view.detail if view else "gone"
            if not retried:
                # Its free ports are picked before it binds them: one that another program took meanwhile
                # ends it at once.  One more try on fresh ports.
                retried = True
                out.write(f"the local Ray head ended while starting ({why}); trying again on other ports\n")
                _start_head(s, cluster)
                continue
            raise CommandError(f"the local Ray head ended: {why} (see `processes log {HEAD_NAME}`)")
        v = _version(cluster) if view.state == ProcState.RUNNING else None
        if v is not None:
            out.write(f"local Ray head up: {cluster.address()} (Ray {v.get('ray_version')}, pid {view.pid}, "
                      f"temp dir {(cluster.head_info() or {}).get('temp_dir')})\n")
            return 0
        if time.monotonic() > deadline:
            raise CommandError(f"the local Ray head did not answer within {args.timeout:g} s "
                               f"(state {view.state.value}: {view.detail}); it is left running: `cluster down` ends it")
        time.sleep(0.5)


def _start_head(s: Session, cluster: Cluster) -> None:
    from backend.supervisor.raycluster import HEAD_NAME, ClusterError

    try:
        spec = cluster.head_spec()
        cluster.prepare_head(spec)
    except ClusterError as exc:
        raise CommandError(str(exc)) from None
    s.sup.register(spec)
    s.sup.start(HEAD_NAME, actor=actor(), source=SOURCE)


def cmd_down(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.supervisor.raycluster import HEAD_NAME
    from backend.supervisor.supervisor import SupervisorError
    from specdeck_types.process import ProcState

    cluster = _cluster(s)
    if not cluster.is_local:
        raise CommandError(f"[cluster] address is {cluster.config.address}: `cluster down` ends only a head "
                           "Specdeck started (address = \"local\")")
    view = s.sup.view(HEAD_NAME)
    if view is None or not view.live:
        cluster.forget_head()
        out.write("the local Ray head is not running\n")
        return 0
    try:
        view = s.sup.stop(HEAD_NAME, actor=actor(), source=SOURCE, wait=True)
    except SupervisorError as exc:
        raise CommandError(str(exc)) from None
    if view.state == ProcState.STOPPING:
        raise CommandError(f"the local Ray head (pid {view.pid}) is still stopping: {view.detail}")
    cluster.forget_head()
    out.write(f"local Ray head stopped ({view.detail})\n")
    return 0


def status(s: Session) -> dict[str, Any]:
    from backend.supervisor.raybackend import describe_jobs
    from backend.supervisor.raycluster import HEAD_NAME, ClusterError
    from backend.supervisor.rayjobs import RayApiError

    cluster = _cluster(s)
    head = s.sup.view(HEAD_NAME) if cluster.is_local else None
    d: dict[str, Any] = {
        "kind": "ray", "local": cluster.is_local, "address": None, "up": False, "version": None,
        "head_pid": head.pid if head is not None and head.live else None,
        "head_state": head.state.value if head is not None else None,
        "nodes": [], "jobs": [], "error": None,
        "processes": [{"name": v.name, "state": v.state.value, "submission_id": v.submission_id,
                       "pending": v.pending} for v in s.sup.views() if v.backend == "ray"],
    }
    try:
        d["address"] = cluster.address()
        client = cluster.client()
        d["version"] = client.version().get("ray_version")
        d["up"] = True
        d["nodes"] = client.nodes()
        d["jobs"] = describe_jobs(client)
    except (ClusterError, RayApiError) as exc:
        d["error"] = str(exc)
    return d


def cmd_status(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    d = status(s)
    if args.json:
        json.dump(d, out, indent=2)
        out.write("\n")
        return 0 if d["up"] else 1
    where = "local head" if d["local"] else "cluster"
    if not d["up"]:
        out.write(f"{where}: down ({d['error']})\n")
        return 1
    out.write(f"{where}: {d['address']} (Ray {d['version']})" + (f", pid {d['head_pid']}" if d["head_pid"] else "")
              + "\n")
    for n in d["nodes"]:
        res = ", ".join(f"{k} {v:g}" for k, v in sorted(n["resources"].items())
                        if not k.startswith(("node:", "memory", "object_store")))
        out.write(f"  node {n['address']}{' (head)' if n['head'] else ''}{'' if n['alive'] else ' DEAD'}: {res}\n")
    out.write(f"  jobs: {len(d['jobs'])} known to Ray\n")
    for j in d["jobs"]:
        out.write(f"    {j['submission_id']}  {j['status']:<9} {j['name'] or '-'}  by {j['user'] or '-'}\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("cluster", help="the workspace's Ray cluster: up, down, status")
    cs = c.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = cs.add_parser("up", help="start the local head Specdeck owns, or check a remote cluster with its token")
    a.add_argument("--timeout", type=float, default=UP_TIMEOUT_S, help="seconds to wait for the head (default 120)")
    a.set_defaults(func=cmd_up)
    a = cs.add_parser("down", help="end the local head Specdeck started (by pid; never `ray stop`)")
    a.set_defaults(func=cmd_down, store_optional=True)
    a = cs.add_parser("status", help="address, version, nodes and their resources, jobs known")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    a.set_defaults(func=cmd_status, acts=False)
