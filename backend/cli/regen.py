"""``regen``: run, follow, check and requeue a regeneration; the commands live in :mod:`backend.regen.cli`."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from backend.regen import cli as regen_cli


def _run(args: argparse.Namespace, out: TextIO) -> int:
    return regen_cli.main(args, out, sys.stderr)


def register(sub: argparse._SubParsersAction) -> None:
    regen_cli.add_parser(sub)
    # A regeneration reads and writes its own files; it opens no supervisor session.
    sub.choices["regen"].set_defaults(func=_run, session=False)
