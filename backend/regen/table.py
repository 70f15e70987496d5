"""The [[dataset]] and [[mix]] tables in specdeck.toml, checked by this domain: mix lines name catalog datasets.  Each problem is "path:line: key: why";
the workspace file reader (:mod:`backend.workspace`) runs this check through
:mod:`backend.flows.workspace`."""

from __future__ import annotations

from pathlib import Path

from backend.regen.catalog import check_catalog
from backend.tomllines import dotted, locate
from backend.workspace import WorkspaceConfig


def check_catalog_table(cfg: WorkspaceConfig, text: str, path: Path | str) -> list[str]:
    """Mix lines name catalog datasets (backend.regen.catalog.check_catalog)."""
    out = []
    for loc, why in check_catalog(cfg.dataset, cfg.mix):
        line = locate(text, loc)
        out.append(f"{f'{path}:{line}' if line else path}: {dotted(loc)}: {why}")
    return out
