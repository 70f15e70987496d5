"""``alerts``: the alert history kept by the dashboard's alerts engine, acknowledgement, mutes,
and a test of the notification channels.

    alerts list [--all] [--json]        active alerts (--all: the history, newest first)
    alerts ack ID                       acknowledge one (no more notifications about it)
    alerts mute TARGET [--hours H]      mute a rule (accept-stuck) or one key (accept-stuck:glm5)
    alerts unmute TARGET
    alerts notify-test                  send a test notification to [alerts] webhook and command

``--json``: one JSON object per line.  Exit status 1 when an ID is unknown, when nothing is
configured to notify, or when a channel did not take the test.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import time
from typing import TextIO

_STATE_WORD = {"muted": "MUTED", "acked": "ACKED", "active": "ACTIVE", "cleared": "cleared"}


def _actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


def _open(args: argparse.Namespace):
    from backend.flows.workspace import load_workspace
    from state import Store
    from state.alerts import AlertStore

    ws = load_workspace(args.workspace)
    store = Store(ws.store_path)
    return ws, store, AlertStore(store)


def _when(t: float | None) -> str:
    return "N/A" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _status(rec, mutes) -> str:
    if not rec.active:
        return "cleared"
    if any(m.covers(rec.key, rec.rule) for m in mutes):
        return "muted"
    return "acked" if rec.acked else "active"


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    ws, store, alerts = _open(args)
    with store:
        mutes = alerts.mutes()
        recs = alerts.history(limit=args.limit) if args.all else alerts.active()
    if args.json:
        for r in recs:
            out.write(json.dumps({**dataclasses.asdict(r), "status": _status(r, mutes)}, ensure_ascii=False) + "\n")
        return 0
    if not recs:
        out.write("no active alerts\n" if not args.all else "no alerts recorded yet\n")
        if not args.all:
            out.write("(the dashboard evaluates the rules while it runs; --all shows the history)\n")
        return 0
    for r in recs:
        st = _status(r, mutes)
        extra = f", cleared {_when(r.cleared_at)}" if r.cleared_at is not None else ""
        if r.acked:
            extra += f", acknowledged by {r.acked_by} {_when(r.acked_at)}"
        out.write(f"#{r.id} {r.severity.upper():7} {_STATE_WORD[st]:7} {_when(r.fired_at)}  {r.title}\n"
                  f"    what to do: {r.action}\n    link: {r.link}  (key {r.key}{extra})\n")
    for m in mutes:
        out.write(f"muted: {m.target} until {_when(m.until)} by {m.muted_by}\n")
    return 0


def cmd_ack(args: argparse.Namespace, out: TextIO) -> int:
    from backend.cli.session import CommandError
    from state.alerts import UnknownAlert

    ws, store, alerts = _open(args)
    with store:
        try:
            rec = alerts.ack(args.id, _actor())
        except UnknownAlert as exc:
            raise CommandError(f"{exc}: `alerts list --all` shows the ids") from None
    out.write(f"#{rec.id} acknowledged by {rec.acked_by}: {rec.title}\n")
    return 0


def cmd_mute(args: argparse.Namespace, out: TextIO) -> int:
    ws, store, alerts = _open(args)
    with store:
        m = alerts.mute(args.target, time.time() + args.hours * 3600.0, _actor())
    out.write(f"{m.target} muted until {_when(m.until)}\n")
    return 0


def cmd_unmute(args: argparse.Namespace, out: TextIO) -> int:
    from backend.cli.session import CommandError

    ws, store, alerts = _open(args)
    with store:
        if not alerts.unmute(args.target):
            raise CommandError(f"{args.target} is not muted")
    out.write(f"{args.target} unmuted\n")
    return 0


def cmd_notify_test(args: argparse.Namespace, out: TextIO) -> int:
    from backend.cli.session import CommandError
    from backend.flows.workspace import load_workspace
    from backend.flows.alerts import notifier_of
    from backend.alerts.engine import AlertEngine

    ws = load_workspace(args.workspace)
    notifier = notifier_of(ws.config.alerts)
    if not notifier.configured:
        raise CommandError(f"{ws.config_path}: [alerts] has neither webhook = \"URL\" nor command = [...]: "
                           "nothing to send a test to")
    from state import Store

    with Store(ws.store_path) as store:
        sent = AlertEngine(store, notifier=notifier, workspace=ws.name).test()
    for d in sent:
        out.write(f"{d.channel}: {'sent' if d.ok else 'FAILED'} ({d.detail})\n")
    return 0 if sent and all(d.ok for d in sent) else 1


def _check_mute(args: argparse.Namespace) -> str | None:
    if not (0 < args.hours <= 24 * 30):
        return f"--hours {args.hours:g}: a mute lasts more than 0 and at most 720 hours"
    if not args.target.strip():
        return "the target is a rule (accept-stuck) or a key (accept-stuck:glm5)"
    return None


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("alerts", help="alerts: list, acknowledge, mute, test the notifications")
    s = a.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = s.add_parser("list", help="active alerts (--all: the history)")
    p.add_argument("--all", action="store_true", help="every alert recorded, newest first")
    p.add_argument("--limit", type=int, default=500, help="at most this many with --all (default 500)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_list, session=False)
    p = s.add_parser("ack", help="acknowledge an alert (no more notifications about it)")
    p.add_argument("id", type=int)
    p.set_defaults(func=cmd_ack, session=False)
    p = s.add_parser("mute", help="mute a rule or one alert key for a while")
    p.add_argument("target", help="a rule (accept-stuck) or a key (accept-stuck:glm5)")
    p.add_argument("--hours", type=float, default=4.0, help="how long (default 4)")
    p.set_defaults(func=cmd_mute, session=False, check=_check_mute)
    p = s.add_parser("unmute", help="lift a mute")
    p.add_argument("target")
    p.set_defaults(func=cmd_unmute, session=False)
    p = s.add_parser("notify-test", help="send a test notification to the configured webhook and command")
    p.set_defaults(func=cmd_notify_test, session=False)
