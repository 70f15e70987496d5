"""The [[server]] tables in specdeck.toml, checked by this domain: each a valid ServerConfig, named unlike every process.  Each problem is "path:line: key: why";
the workspace file reader (:mod:`backend.workspace`) runs this check through
:mod:`backend.flows.workspace`."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from backend.sglang.config import ServerConfig
from backend.tomllines import describe_error, locate
from backend.workspace import WorkspaceConfig


def check_server_table(cfg: WorkspaceConfig, text: str, path: Path | str) -> list[str]:
    problems: list[str] = []
    names: dict[str, tuple] = {p.name: ("process", i, "name") for i, p in enumerate(cfg.process)}
    for i, entry in enumerate(cfg.server):
        try:
            sc = ServerConfig.model_validate(entry)
        except ValidationError as exc:
            for err in exc.errors():
                err = dict(err)
                err["loc"] = ("server", i, *err["loc"])
                problems.append(describe_error(err, text, path))
            continue
        if sc.name in names:
            other = names[sc.name]
            problems.append(f"{path}:{locate(text, ('server', i, 'name'))}: server[{i}].name: "
                            f"{sc.name!r} is already the name of {other[0]}[{other[1]}] "
                            f"(line {locate(text, other)}); every process and server needs its own name")
        else:
            names[sc.name] = ("server", i, "name")
    return problems
