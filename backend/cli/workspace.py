"""``init``: create a workspace folder with the demo config.  ``workspace backup``: copy its state store."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from backend.cli.session import CommandError

# The workspace reader and the state store are imported by the command that runs, not by --help.


def cmd_init(args: argparse.Namespace, out: TextIO) -> int:
    from backend.workspace import CONFIG_NAME
    from backend.flows.workspace import load_workspace

    root = Path(args.dir).expanduser().resolve()
    cfg = root / CONFIG_NAME
    existed = cfg.exists()
    # Writes the demo config when there is none, validates it, creates logs/, run/, outputs/.
    load_workspace(root, create_demo=True)
    out.write(f"{cfg}: {'already there, left as it was' if existed else 'written'}\n")
    return 0


def cmd_backup(args: argparse.Namespace, out: TextIO) -> int:
    """Copy the state store with SQLite's online backup API (safe while the dashboard writes)."""
    from backend.flows.workspace import load_workspace
    from state.store import Store, list_backups

    ws = load_workspace(args.workspace)
    if not ws.store_path.exists():
        raise CommandError(f"{ws.store_path} does not exist: this workspace has no state store to back up yet")
    with Store(ws.store_path) as store:  # checks it first: a damaged store is not copied
        try:
            made = store.backup(args.to)
        except OSError as exc:
            raise CommandError(f"backup of {ws.store_path} not made: {exc}") from None
    out.write(f"{made}: backup of {ws.store_path} ({made.stat().st_size:,} bytes)\n")
    others = [p for p in list_backups(ws.store_path) if p != made]
    if others:
        out.write(f"{len(others)} other backup(s) in {others[0].parent}, newest {others[0].name}\n")
    out.write(f"to restore: stop the dashboard, remove {ws.store_path.name}-wal and {ws.store_path.name}-shm, "
              f"and copy the backup over {ws.store_path}; running processes are re-adopted from run/\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("init", help="create a workspace (with the demo config) in DIR")
    a.add_argument("dir")
    # Runs without opening a workspace session: it makes the workspace.
    a.set_defaults(func=cmd_init, session=False)
    w = sub.add_parser("workspace", help="the workspace's state store: backup")
    ws = w.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = ws.add_parser("backup", help="copy the state store (SQLite's online backup; safe while it is in use)")
    a.add_argument("--to", metavar="PATH",
                   help="the backup file (default: backups/state-YYYYmmdd-HHMMSS.db beside the store)")
    # No session: a backup starts, adopts and syncs nothing.
    a.set_defaults(func=cmd_backup, session=False)
