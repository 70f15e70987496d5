"""``init``: create a workspace folder with the demo config."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from backend.workspace import CONFIG_NAME
from backend.flows.workspace import load_workspace


def cmd_init(args: argparse.Namespace, out: TextIO) -> int:
    root = Path(args.dir).expanduser().resolve()
    cfg = root / CONFIG_NAME
    existed = cfg.exists()
    # Writes the demo config when there is none, validates it, creates logs/, run/, outputs/.
    load_workspace(root, create_demo=True)
    out.write(f"{cfg}: {'already there, left as it was' if existed else 'written'}\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("init", help="create a workspace (with the demo config) in DIR")
    a.add_argument("dir")
    # Runs without opening a workspace session: it makes the workspace.
    a.set_defaults(func=cmd_init, session=False)
