"""``servers``: the workspace's SGLang servers and their preflight, and ``servers parselog``: an SGLang
server log as JSON lines.

``parselog`` prints one JSON object per parsed record on stdout and a summary on stderr: the counts,
then every rejected line as ``FILE:LINE: unparsed: REASON`` (a batch line whose label or values are not
what SGLang prints, a timestamp that cannot be read, a line longer than 64 KiB).  Bad lines never stop
the run: exit status 0 whatever the content, 2 only when the file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import deque
from typing import TextIO

from backend.cli.session import CommandError, Session, print_findings


def cmd_servers_list(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    """Every [[server]] and [[router]] with its state; a router with its workers as it lists them now
    (read only: nothing is added or removed)."""
    from backend.flows.router_sync import RouterSync
    from backend.sglang.router import server_url

    names = s.fleet.names()
    routers = RouterSync(s.fleet, s.sup, s.ws.run_dir).tick(act=False) if s.fleet.router_names() else []
    if getattr(args, "json", False):
        rows = []
        for name in names:
            cfg = s.fleet.config(name)
            v = s.sup.view(name)
            rows.append({"name": name, "kind": "server", "state": v.state.value if v else "NEVER",
                         "url": server_url(cfg.host, cfg.port), "host": cfg.host, "port": cfg.port,
                         "speculation": cfg.speculative.algorithm, "simulated": cfg.simulate,
                         "routers": [r.name for r in routers if name in r.members]})
        rows += [r.to_dict() for r in routers]
        json.dump(rows, out, indent=2)
        out.write("\n")
        return 0
    if not names:
        out.write(f"no [[server]] entries in {s.ws.config_path}\n")
    for name in names:
        cfg = s.fleet.config(name)
        v = s.sup.view(name)
        spec = cfg.speculative.algorithm or "off"
        out.write(f"{name}: {v.state.value if v else 'NEVER'} · {cfg.host}:{cfg.port} · speculation {spec}"
                  f"{' · simulated' if cfg.simulate else ''}\n")
    for r in routers:
        listed = [w for w in r.workers if w.listed]
        out.write(f"{r.name}: router {r.state} · {r.url} · {r.policy} · {r.healthy_workers}/{len(listed)} "
                  f"workers healthy" + (f" · {r.error}" if r.error else "") + "\n")
        for w in r.workers:
            health = "pending" if w.pending else ("healthy" if w.healthy else "unhealthy") if w.listed else "not joined"
            load = f" · load {w.load}" if w.load is not None else ""
            out.write(f"  {w.server or '(not a server of the workspace)'} {w.url}: {health}{load}"
                      f"{' · draining' if w.draining else ''}\n")
    return 0


def cmd_servers_preflight(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    if args.name not in s.fleet.names():
        raise CommandError(f"no server named {args.name!r} in {s.ws.config_path}")
    from backend.sglang import argcheck
    from backend.sglang.version import resolve_capabilities

    # A running dashboard of this workspace lends its warm SGLang parser (run/argparser.sock);
    # without one the check starts a parser here, which first imports sglang.
    argcheck.borrow_from(s.ws.run_dir)
    cfg = s.fleet.config(args.name)
    why = argcheck.slow_first_check(cfg, resolve_capabilities(cfg), s.ws.run_dir)
    if why:
        sys.stderr.write(f"note: {why}: SGLang's parser starts here for this check and imports sglang first, "
                         "which takes several seconds; a running dashboard of this workspace keeps one warm per "
                         "server (until 30 minutes without a check) and checks from here then use it\n")
    findings = s.fleet.preflight(args.name)
    if args.json:
        from dataclasses import asdict

        json.dump([asdict(f) for f in findings], out, indent=2)
        out.write("\n")
    else:
        print_findings(findings, out)
        errors = sum(1 for f in findings if f.severity == "error")
        out.write(f"preflight of {args.name}: {errors} error(s), "
                  f"{sum(1 for f in findings if f.severity == 'warning')} warning(s)\n")
    return 1 if any(f.severity == "error" for f in findings) else 0


PARSELOG_KINDS = ("decode", "prefill", "phase", "fatal")


def _finite(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None  # keep the output standard JSON
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def cmd_servers_parselog(args: argparse.Namespace, out: TextIO) -> int:
    from backend.sglang.ingest import MAX_LINE, LogIngester
    from backend.sglang.version import capabilities

    err = sys.stderr
    kinds = {k.strip() for k in args.kinds.split(",") if k.strip()}
    bad = kinds - set(PARSELOG_KINDS)
    if bad:
        err.write(f"--kinds: unknown kind(s) {', '.join(sorted(bad))}; choose from {', '.join(PARSELOG_KINDS)}\n")
        return 2
    try:
        with open(args.logfile, "rb"):
            pass
    except OSError as exc:
        err.write(f"{args.logfile}: cannot read: {exc.strerror or exc}\n")
        return 2
    ing = LogIngester(args.logfile, caps=capabilities(args.version) if args.version else None, max_points=1)
    ing.unparsed = deque()  # every rejected line, not only the latest ones the dashboard keeps
    dumps = json.dumps

    def emit(rec) -> None:
        if rec.kind in kinds:
            out.write(dumps(_finite(rec.to_dict()), default=str))
            out.write("\n")

    ing.add_listener(emit)
    while ing.poll(max_bytes=64 * 1024 * 1024):
        pass
    ing.flush()
    st = ing.stats
    cut = f" ({st.cut_lines} cut: longer than {MAX_LINE // 1024} KiB)" if st.cut_lines else ""
    err.write(f"{args.logfile}: {st.lines} lines, {st.decode_lines} decode, {st.prefill_lines} prefill, "
              f"{st.http_lines} HTTP access, {st.event_lines} startup/failure events, "
              f"{st.unparsed_lines} unparsed line(s){cut}\n")
    for u in ing.unparsed:
        err.write(f"{args.logfile}:{u.line_no}: unparsed: {u.reason}\n")
    if ing.rate_seen:
        err.write(f"accept rate meaning: {ing.accept_rate_description}\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    servers = sub.add_parser("servers", help="SGLang servers: list, preflight, parselog")
    ss = servers.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = ss.add_parser("list", help="every [[server]] and [[router]] entry, its state, a router's workers")
    a.add_argument("--json", action="store_true", help="machine-readable: servers, then routers with their workers")
    a.set_defaults(func=cmd_servers_list, acts=False)
    a = ss.add_parser("preflight", help="check a server's launch config (exit 1 on errors)")
    a.add_argument("name")
    a.add_argument("--json", action="store_true", help="machine-readable findings")
    a.set_defaults(func=cmd_servers_preflight, acts=False)
    a = ss.add_parser("parselog", help="an SGLang server log as JSON lines (stdout), a summary and every "
                                       "unparsed line (stderr)")
    a.add_argument("logfile")
    a.add_argument("--kinds", default=",".join(PARSELOG_KINDS),
                   help="comma-separated subset of " + ",".join(PARSELOG_KINDS))
    a.add_argument("--version", default=None, help="sglang version that wrote the log (for accept rate meaning)")
    a.set_defaults(func=cmd_servers_parselog, session=False)
