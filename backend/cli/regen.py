"""``regen``: regeneration runs in the foreground; the commands live in :mod:`backend.regen.cli`.

A run opens its own workspace (``regen ... --workspace DIR``) only when it names servers or a mix,
so the command needs no supervisor session."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from backend.regen import cli as regen_cli


def _run(args: argparse.Namespace, out: TextIO) -> int:
    return regen_cli.main(args, out, sys.stderr)


def register(sub) -> None:
    regen_cli.add_parser(sub)
    sub.choices["regen"].set_defaults(func=_run, session=False)
