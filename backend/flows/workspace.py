"""The whole workspace: the file reader (:mod:`backend.workspace`) with every domain's part.  The regeneration
domain's models type the [[dataset]] and [[mix]] tables; each domain checks its own tables
(``table.py`` in ``backend/sglang``, ``regen``, ``train``; ``routertable.py`` for [[router]]); the demo workspace is written when none is
chosen.  The dashboard, the command line and the flows open the workspace here."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from backend import workspace as reader
from backend.flows.demo import write_demo_workspace
from backend.regen.catalog import DatasetConfig, MixEntry
from backend.regen.table import check_catalog_table
from backend.sglang.routertable import check_router_table
from backend.sglang.table import check_server_table
from backend.train.table import check_train_table
from backend.workspace import CONFIG_NAME, Workspace, WorkspaceConfig


class SpecdeckConfig(WorkspaceConfig):
    """specdeck.toml with the regeneration catalog typed by its domain's models."""

    dataset: list[DatasetConfig] = Field(default_factory=list)
    mix: list[MixEntry] = Field(default_factory=list)


CHECKS = (check_server_table, check_router_table, check_catalog_table, check_train_table)


def parse_config(text: str, path: Path | str = CONFIG_NAME) -> SpecdeckConfig:
    """Parse and check specdeck.toml text; ConfigError lists every problem with its line."""
    return reader.parse_config(text, path, model=SpecdeckConfig, checks=CHECKS)  # type: ignore[return-value]


def load_workspace(path: str | Path | None = None, *, create_demo: bool | None = None) -> Workspace:
    """Open the workspace at ``path`` (see :func:`backend.workspace.resolve_root`), the demo one
    written when no folder was chosen and none is there."""
    return reader.load_workspace(path, create_demo=create_demo, model=SpecdeckConfig, checks=CHECKS,
                                 write_demo=write_demo_workspace)
