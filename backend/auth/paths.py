"""Paths typed in the dashboard: allowed only under the workspace and the roots it lists.

A browser session that may follow a log or inspect a checkpoint could
otherwise read anything the dashboard's user can read (``/etc/shadow``, SSH
keys, a Hugging Face token, ``users.toml``).  A typed path is resolved first
(``~`` expanded, a relative path taken from the workspace, every symlink
followed) and then must lie under one of the roots, so a symlink placed under
a root that points elsewhere is refused too.  The command line, run by the
machine's user, is not limited.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

#: Files under a root that a typed path may still never name: the users' hashes.
PRIVATE_NAMES = ("users.toml", ".users.toml.lock")


class PathRefused(PermissionError):
    """A typed path outside the allowed roots (or empty); the message is safe to show."""


def describe_roots(roots: Sequence[Path]) -> str:
    return ", ".join(str(r) for r in roots) or "(none)"


def resolve_typed(typed: str | os.PathLike, roots: Sequence[Path], *, base: Path | None = None) -> Path:
    """The resolved path of ``typed`` when it lies under one of ``roots``; raises :class:`PathRefused`.

    ``base`` anchors a relative path (the workspace); without it a relative path is refused.
    """
    text = os.fspath(typed).strip() if typed is not None else ""
    if not text:
        raise PathRefused("no path given")
    if "\x00" in text:
        raise PathRefused("a path cannot hold a NUL character")
    p = Path(text).expanduser()
    if not p.is_absolute():
        if base is None:
            raise PathRefused(f"{text}: give an absolute path")
        p = base / p
    try:
        resolved = p.resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise PathRefused(f"{text}: cannot be resolved ({exc})") from None
    for root in roots:
        if resolved == root or resolved.is_relative_to(root):
            if resolved.name in PRIVATE_NAMES:
                raise PathRefused(f"{text}: the users file is never shown in the dashboard")
            return resolved
    shown = f"{text} (resolves to {resolved})" if str(resolved) != text else text
    raise PathRefused(f"{shown} is outside the folders the dashboard may read: {describe_roots(roots)}. "
                      "Add its folder to `roots` under [access] in the workspace file to allow it.")
