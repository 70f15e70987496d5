"""Specdeck's command line: the dashboard's process operations without a browser.

    python -m backend.cli [--workspace DIR] processes list [--json]
    python -m backend.cli [--workspace DIR] processes start NAME [--launch-anyway]
    python -m backend.cli [--workspace DIR] processes stop NAME [--no-wait]
    python -m backend.cli [--workspace DIR] processes stop-all
    python -m backend.cli [--workspace DIR] processes restart NAME [--launch-anyway]
    python -m backend.cli [--workspace DIR] processes log NAME [-n N] [--follow]
    python -m backend.cli [--workspace DIR] cluster up [--timeout S] | down | status [--json]
    python -m backend.cli [--workspace DIR] alerts list [--all] [--json] | ack ID | mute TARGET
                                            | unmute TARGET | notify-test
    python -m backend.cli [--workspace DIR] bench import FILE... [--server NAME] [--json]
    python -m backend.cli [--workspace DIR] bench list [--server S] [--concurrency N] [--json]
    python -m backend.cli [--workspace DIR] bench delete ID...
    python -m backend.cli [--workspace DIR] bench run SERVER|ROUTER [--concurrency N ...] [--builtin|--sglang] [--json]
    python -m backend.cli [--workspace DIR] bench sweep SERVER [--steps N ...] [--topk K ...] [--draft-tokens N ...]
                                            [--baseline|--baseline-only] [--state-file PATH] [--json]
    python -m backend.cli [--workspace DIR] servers list [--json]
    python -m backend.cli [--workspace DIR] servers preflight NAME [--json]
    python -m backend.cli servers parselog LOG [--kinds decode,prefill,phase,fatal] [--version V]
    python -m backend.cli [--workspace DIR] supervise [--interval S]
    python -m backend.cli train parselog LOG [--json] | tracker DIR [--json] | checkpoints DIR [--json]
                                            | inspect CKPT [--json]
    python -m backend.cli [--workspace DIR] train runs [--json] | command NAME [--resume] [--json]
    python -m backend.cli [--workspace DIR] train start NAME | stop NAME [--no-wait] | resume NAME [--yes]
    python -m backend.cli [--workspace DIR] train deploy CKPT --server NAME [--keep|--restore-after] [--json]
    python -m backend.cli [--workspace DIR] users add|passwd|role|remove NAME ... | list [--json]
    python -m backend.cli init DIR
    python -m backend.cli [--workspace DIR] workspace backup [--to PATH]
    python -m backend.cli [--workspace DIR] regen run ... | status PATH [--json] | validate PATH ... | requeue PATH

The workspace is the ``--workspace`` folder, else ``$SPECDECK_WORKSPACE``,
else the demo workspace.  Every start/stop/restart is written to the audit
log with the user's name and source ``cli``.  Starting a server runs its
preflight first; errors refuse the start unless ``--launch-anyway`` (audited).  Exit status: 0 done,
1 refused or failed, 2 bad usage or workspace config.  A state store that is
damaged or cannot be written is one line naming the file, what is wrong and
what to do; a command that would start or change processes is refused while
the store cannot be written (stop and stop-all still work: the run files
record how each process ended).

Each domain is one module of this package with a ``register(sub)`` function
that adds its subcommands to the top-level subparsers; :data:`DOMAINS` lists
them in the order ``--help`` shows them.  A subcommand sets ``func`` to a
``(session, args, out) -> exit status`` callable (or, with ``session=False``,
to ``(args, out)``, for commands that need no workspace) and may set
``check`` to an ``(args) -> message or None`` usage check.  A reading
command sets ``acts=False``: its session observes but never starts, signals
or restarts anything.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, TextIO

__all__ = ["COMMANDS", "DOMAINS", "build_parser", "main"]

# Commands that may run while the state store cannot be written: a supervise loop keeps
# supervising from memory and writes its state back once it can.
_STORE_OPTIONAL = frozenset({"supervise"})

DOMAINS = (
    "backend.cli.alerts",
    "backend.cli.bench",
    "backend.cli.cluster",
    "backend.cli.processes",
    "backend.cli.regen",
    "backend.cli.servers",
    "backend.cli.supervise",
    "backend.cli.train",
    "backend.cli.users",
    "backend.cli.workspace",
)


# Each top-level command and the module that registers it: a command line imports only its own
# module (`regen run` never imports the supervisor or the benchmark client); --help and an unknown
# command get them all.
COMMANDS = {
    "alerts": "backend.cli.alerts",
    "bench": "backend.cli.bench",
    "cluster": "backend.cli.cluster",
    "init": "backend.cli.workspace",
    "processes": "backend.cli.processes",
    "regen": "backend.cli.regen",
    "servers": "backend.cli.servers",
    "supervise": "backend.cli.supervise",
    "train": "backend.cli.train",
    "users": "backend.cli.users",
    "workspace": "backend.cli.workspace",
}


def command_of(argv: list[str]) -> str | None:
    """The top-level command ``argv`` names (after ``--workspace DIR``), or None for none or help."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--workspace", "-w"):
            i += 2
            continue
        if a.startswith("--workspace=") or (a.startswith("-w") and len(a) > 2 and not a.startswith("--")):
            i += 1
            continue
        return None if a.startswith("-") else a
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given the command line, of its command only."""
    p = argparse.ArgumentParser(prog="python -m backend.cli", description="Specdeck without the browser.")
    p.add_argument("--workspace", "-w", metavar="DIR",
                   help="workspace folder (default: $SPECDECK_WORKSPACE, else the demo workspace)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = command_of(argv) if argv is not None else None
    for module in ((COMMANDS[command],) if command in COMMANDS else DOMAINS):
        importlib.import_module(module).register(sub)
    return p


def _is(exc: BaseException, module: str, name: str) -> bool:
    """``exc`` is an instance of ``module.name``; a module never imported raised nothing of its own (so a
    command that never opens the store does not import sqlite3 to tell its errors)."""
    cls = getattr(sys.modules.get(module), name, None)
    return isinstance(cls, type) and isinstance(exc, cls)


def _config_error(exc: BaseException) -> bool:
    return _is(exc, "backend.workspace", "ConfigError")


def _failure(exc: BaseException) -> bool:
    """A refusal or failure that is one line of its own (it names the file, what is wrong, what to do)."""
    return (_is(exc, "state.store", "StoreError") or _is(exc, "backend.cli.session", "CommandError")
            or _is(exc, "backend.supervisor.supervisor", "SupervisorError"))


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None, *,
         loaded: Callable[[], None] | None = None) -> int:
    """Run one command line; ``loaded()`` is called once the command's modules are loaded and its
    arguments parsed, before it runs (``python -m backend.cli`` hands SIGTERM back to the command)."""
    out = out or sys.stdout
    err = err or sys.stderr
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    if loaded is not None:
        loaded()
    check = getattr(args, "check", None)
    problem = check(args) if check is not None else None
    if problem:
        err.write(f"error: {problem}\n")
        return 2
    try:
        if not getattr(args, "session", True):
            return args.func(args, out)
        from backend.cli.session import Session

        session = Session(args.workspace, act=getattr(args, "acts", True))
    except Exception as exc:
        if _config_error(exc):
            err.write(f"error: {exc}\n")
            return 2
        if _failure(exc) and not _is(exc, "backend.supervisor.supervisor", "SupervisorError"):
            err.write(f"error: {exc}\n")  # names the file, what is wrong and what to do
            return 1
        if _is(exc, "sqlite3", "Error"):
            err.write(f"error: the state file of the workspace could not be opened or upgraded: {exc}\n")
            return 1
        raise
    try:
        if getattr(args, "acts", True) and not getattr(args, "store_optional", args.command in _STORE_OPTIONAL):
            session.require_writable()
        return args.func(session, args, out)
    except Exception as exc:
        if _failure(exc):
            err.write(f"error: {exc}\n")
            return 1
        if _is(exc, "sqlite3", "Error"):
            health = session.store.health()
            err.write(f"error: {health.message if not health.ok else f'state store {session.store.path}: {exc}'}\n")
            return 1
        raise
    finally:
        note = session.store_note()
        if note:
            err.write(f"warning: {note}\n")
        session.close()
