"""``servers``: the workspace's SGLang servers and their preflight."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from backend.cli.session import CommandError, Session, print_findings


def cmd_servers_list(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    names = s.fleet.names()
    if not names:
        out.write(f"no [[server]] entries in {s.ws.config_path}\n")
    for name in names:
        cfg = s.fleet.config(name)
        v = s.sup.view(name)
        spec = cfg.speculative.algorithm or "off"
        out.write(f"{name}: {v.state.value if v else 'NEVER'} · {cfg.host}:{cfg.port} · speculation {spec}"
                  f"{' · simulated' if cfg.simulate else ''}\n")
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


def register(sub: argparse._SubParsersAction) -> None:
    servers = sub.add_parser("servers", help="SGLang servers: list, preflight")
    ss = servers.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = ss.add_parser("list", help="every [[server]] entry and its state")
    a.set_defaults(func=cmd_servers_list, acts=False)
    a = ss.add_parser("preflight", help="check a server's launch config (exit 1 on errors)")
    a.add_argument("name")
    a.add_argument("--json", action="store_true", help="machine-readable findings")
    a.set_defaults(func=cmd_servers_preflight, acts=False)
