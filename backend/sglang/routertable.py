"""The [[router]] tables in specdeck.toml, checked by this domain: each a valid RouterConfig, named
unlike every process, server and other router, in front of servers the file has, on ports no server
or other router of the file listens on, with a readable control-plane key file when one is named.
Each problem is "path:line: key: why"."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from backend.sglang.router import RouterConfig, read_key, reach_host
from backend.tomllines import describe_error, locate
from backend.workspace import WorkspaceConfig


def _at(text: str, path: Path | str, loc: tuple, msg: str) -> str:
    line = locate(text, loc)
    key = f"router[{loc[1]}]" + "".join(f".{p}" for p in loc[2:])
    return f"{path}:{line}: {key}: {msg}" if line else f"{path}: {key}: {msg}"


def check_router_table(cfg: WorkspaceConfig, text: str, path: Path | str) -> list[str]:
    problems: list[str] = []
    names: dict[str, str] = {p.name: "a [[process]]" for p in cfg.process}
    ports: dict[tuple[str, int], str] = {}
    server_names = []
    for s in cfg.server:
        if isinstance(s, dict) and isinstance(s.get("name"), str):
            names.setdefault(s["name"], "a [[server]]")
            server_names.append(s["name"])
            try:
                ports[(reach_host(str(s.get("host") or "127.0.0.1")), int(s.get("port") or 30000))] = \
                    f"server {s['name']!r}"
            except (TypeError, ValueError):
                pass
    for i, entry in enumerate(cfg.router):
        try:
            rc = RouterConfig.model_validate(entry)
        except ValidationError as exc:
            for err in exc.errors():
                err = dict(err)
                err["loc"] = ("router", i, *err["loc"])
                problems.append(describe_error(err, text, path))
            continue
        if rc.name in names:
            problems.append(_at(text, path, ("router", i, "name"), f"{rc.name!r} is already the name of "
                                f"{names[rc.name]}; every process, server and router needs its own name"))
        else:
            names[rc.name] = "another [[router]]"
        if rc.servers is None:
            if not server_names:
                problems.append(_at(text, path, ("router", i, "name"),
                                    "the workspace has no [[server]] to route to"))
        else:
            for name in rc.servers:
                if name not in server_names:
                    problems.append(_at(text, path, ("router", i, "servers"),
                                        f"{name!r} is not a [[server]] of this file (known: "
                                        f"{', '.join(server_names) or 'none'})"))
        host = reach_host(rc.host)
        for key, port in (("port", rc.port), ("metrics_port" if rc.metrics_port is not None else "port",
                                              rc.metrics)):
            what = f"port {port}"
            if port == rc.metrics:
                what = f"metrics port {port}" + (" (port + 1; set metrics_port)" if rc.metrics_port is None else "")
            if (host, port) in ports:
                problems.append(_at(text, path, ("router", i, key),
                                    f"{what} on {host} is also the port of {ports[(host, port)]}"))
            else:
                ports[(host, port)] = f"router {rc.name!r}"
        key_path = rc.key_path(Path(path).parent)
        if key_path is not None:
            try:
                read_key(key_path)
            except ValueError as exc:
                problems.append(_at(text, path, ("router", i, "control_plane_key_file"), str(exc)))
    return problems
