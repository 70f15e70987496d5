"""``users``: who may sign in to the dashboard, and with which role (``<workspace>/users.toml``).

    python -m backend.cli [--workspace DIR] users add NAME [--role viewer|operator] [--password-stdin]
    python -m backend.cli [--workspace DIR] users passwd NAME [--password-stdin]
    python -m backend.cli [--workspace DIR] users role NAME viewer|operator
    python -m backend.cli [--workspace DIR] users remove NAME
    python -m backend.cli [--workspace DIR] users list [--json]

A ``viewer`` sees everything and acts on nothing; an ``operator`` (what ``add``
gives unless told otherwise) also starts, stops and relaunches, starts jobs
and follows typed paths.  Without ``--password-stdin`` the password is asked
twice on the terminal (never echoed); with it, the first line of standard
input is the password (for scripts: ``printf '%s\\n' "$PW" | ... --password-stdin``).
A running dashboard sees the change at once; removing a user or changing a
password or a role ends that user's sessions.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Callable, TextIO

# backend.auth.users (tomlkit, argon2) is imported when a users command runs, not when it is registered:
# so a role is checked there (UserStore refuses an unknown one), not by argparse choices


def register(sub: argparse._SubParsersAction) -> None:
    users = sub.add_parser("users", help="who may sign in to the dashboard, and with which role: "
                                                "add, passwd, role, remove, list")
    us = users.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in (("add", "add a user (asks for the password)"),
                         ("passwd", "set a user's password (ends their sessions)")):
        a = us.add_parser(action, help=text)
        a.add_argument("name")
        a.add_argument("--password-stdin", action="store_true",
                       help="read the password from the first line of standard input")
        if action == "add":
            a.add_argument("--role", metavar="viewer|operator",
                           help="viewer: sees everything, acts on nothing; operator: also starts, stops, "
                                "relaunches, starts jobs and follows typed paths (default: operator)")
    a = us.add_parser("role", help="change a user's role to viewer or operator (ends their sessions)")
    a.add_argument("name")
    a.add_argument("role", metavar="viewer|operator")
    a = us.add_parser("remove", help="remove a user (ends their sessions)")
    a.add_argument("name")
    a = us.add_parser("list", help="the users, their roles and when their password was set")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    # Managing users only reads and writes users.toml: the session observes, never acts.
    users.set_defaults(func=cmd_users, acts=False)


def _read_password(args, stdin: TextIO, ask: Callable[[str], str]) -> str:
    from backend.auth.passwords import password_problem
    from backend.auth.users import UsersError

    if args.password_stdin:
        line = stdin.readline()
        if not line:
            raise UsersError("--password-stdin: standard input is empty")
        return line[:-1] if line.endswith("\n") else line
    first = ask(f"Password for {args.name}: ")
    if password_problem(first):
        raise UsersError(password_problem(first))
    if ask("Repeat the password: ") != first:
        raise UsersError("the two passwords differ; nothing was changed")
    return first


def run(root, args: argparse.Namespace, out: TextIO, err: TextIO, *, stdin: TextIO | None = None,
        ask: Callable[[str], str] = getpass.getpass) -> int:
    """The ``users`` command against the workspace folder ``root``; returns the exit status."""
    from backend.auth.users import DEFAULT_ROLE, USERS_FILE, UsersError, UserStore

    store = UserStore(root / USERS_FILE)
    try:
        if args.action == "list":
            users = store.users()
            if store.error():
                raise store.error()
            if args.json:
                json.dump([{"name": u.name, "role": u.role, "created": u.created, "changed": u.changed}
                           for u in users.values()], out, indent=2)
                out.write("\n")
            elif not users:
                out.write(f"no users in {store.path}: the dashboard is read-only when reachable from the network\n")
            else:
                for u in users.values():
                    out.write(f"{u.name}  {u.role}  created {u.created or '?'}  password set {u.changed or '?'}\n")
            return 0
        if args.action == "remove":
            store.remove(args.name)
            out.write(f"{args.name}: removed from {store.path}\n")
            return 0
        if args.action == "role":
            store.set_role(args.name, args.role)
            out.write(f"{args.name}: role set to {args.role} in {store.path} "
                      "(their sessions in a running dashboard end)\n")
            return 0
        password = _read_password(args, stdin or sys.stdin, ask)
        if args.action == "add":
            role = getattr(args, "role", None) or DEFAULT_ROLE
            store.add(args.name, password, role=role)
            out.write(f"{args.name}: added to {store.path} as {role}\n")
        else:
            store.set_password(args.name, password)
            out.write(f"{args.name}: password changed in {store.path}\n")
        return 0
    except (UsersError, ValueError) as exc:
        err.write(f"error: {exc}\n")
        return 1
    except (KeyboardInterrupt, EOFError):
        err.write("\nerror: cancelled; nothing was changed\n")
        return 1


def cmd_users(session, args: argparse.Namespace, out: TextIO) -> int:
    """Handler for the command line's session object (its workspace is ``session.ws``)."""
    return run(session.ws.root, args, out, sys.stderr)
