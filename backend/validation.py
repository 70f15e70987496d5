"""Checks shared by the workspace file's tables (``[[server]]``, ``[[train]]``): plain functions
that raise ``ValueError`` with the reason a pydantic validator reports for the field."""

from __future__ import annotations


def check_gpu_indices(v: list[int]) -> list[int]:
    """A ``gpus = [...]`` list: every index 0 or more, none twice."""
    if any(i < 0 for i in v):
        raise ValueError("GPU indices are 0 or more")
    if len(set(v)) != len(v):
        raise ValueError("a GPU is listed twice")
    return v
