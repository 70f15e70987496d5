"""``init``: create a workspace folder with the demo config."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from backend.workspace import load_workspace


def cmd_init(args: argparse.Namespace, out: TextIO) -> int:
    from backend.demo import write_demo_workspace

    root = Path(args.dir).expanduser().resolve()
    cfg = root / "specdeck.toml"
    existed = cfg.exists()
    write_demo_workspace(root)
    load_workspace(root)  # validates it and creates logs/, run/, outputs/
    out.write(f"{cfg}: {'already there, left as it was' if existed else 'written'}\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("init", help="create a workspace (with the demo config) in DIR")
    a.add_argument("dir")
    # Runs without opening a workspace session: it makes the workspace.
    a.set_defaults(func=cmd_init, session=False)
