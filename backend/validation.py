"""Checks shared by the workspace file's tables (``[[server]]``, ``[[train]]``): plain functions
that raise ``ValueError`` with the reason a pydantic validator reports for the field."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
NAME_RULE = "use letters, digits, '.', '_' or '-' (at most 64), starting with a letter or digit"


def check_name(v: str) -> str:
    """The name of a server, process, training run, dataset or mix."""
    if not NAME_RE.match(v):
        raise ValueError(NAME_RULE)
    return v


def check_gpu_indices(v: list[int]) -> list[int]:
    """A ``gpus = [...]`` list: every index 0 or more, none twice."""
    if any(i < 0 for i in v):
        raise ValueError("GPU indices are 0 or more")
    if len(set(v)) != len(v):
        raise ValueError("a GPU is listed twice")
    return v
