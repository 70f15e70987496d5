"""The [[train]] tables in specdeck.toml, checked by this domain: each a valid TrainRunConfig that its SpecForge generation can run, named unlike
every process and server.  Each problem is "path:line: key: why";
the workspace file reader (:mod:`backend.workspace`) runs this check through
:mod:`backend.flows.workspace`."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from backend.train.command import config_problems
from backend.train.config import TrainRunConfig
from backend.tomllines import describe_error, dotted, locate
from backend.workspace import WorkspaceConfig


def check_train_table(cfg: WorkspaceConfig, text: str, path: Path | str) -> list[str]:
    """``[[train]]`` entries: each a valid TrainRunConfig, named unlike every process and server."""
    problems: list[str] = []
    names: dict[str, tuple] = {p.name: ("process", i, "name") for i, p in enumerate(cfg.process)}
    for i, entry in enumerate(cfg.server):
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name not in names:
            names[name] = ("server", i, "name")
    for i, entry in enumerate(cfg.train):
        try:
            tc = TrainRunConfig.model_validate(entry)
        except ValidationError as exc:
            for err in exc.errors():
                err = dict(err)
                err["loc"] = ("train", i, *err["loc"])
                problems.append(describe_error(err, text, path))
            continue
        for field, why in config_problems(tc):  # what the chosen generation cannot do
            loc = ("train", i, *field.split("."))
            line = locate(text, loc)
            problems.append(f"{f'{path}:{line}' if line else path}: {dotted(loc)}: {why}")
        if tc.name in names:
            other = names[tc.name]
            problems.append(f"{path}:{locate(text, ('train', i, 'name'))}: train[{i}].name: "
                            f"{tc.name!r} is already the name of {other[0]}[{other[1]}] "
                            f"(line {locate(text, other)}); every process, server and training run needs its "
                            "own name")
        else:
            names[tc.name] = ("train", i, "name")
    return problems
