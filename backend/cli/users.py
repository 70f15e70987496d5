"""``users``: who may sign in to control the dashboard; the commands live in :mod:`backend.auth.cli`."""

from __future__ import annotations

from backend.auth.cli import add_parser


def register(sub) -> None:
    # Managing users only reads and writes users.toml: the session observes, never acts.
    add_parser(sub).set_defaults(acts=False)
