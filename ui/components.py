"""Small Streamlit widgets shared by the pages."""

from __future__ import annotations

import html
import time

import streamlit as st

from ui import fmt
from ui.auth import control_lock
from ui.context import actor


# Streamlit cuts a metric's label, value and delta and a button's label with an
# ellipsis when its column is narrow ("St…", "accept_…" at 1024 px).  Every page
# lets them wrap instead, lets a row of narrow columns wrap onto a second line,
# and on narrow screens draws metric values a little smaller and trims the wide
# side margins, so nothing a user reads is cut (tests/e2e/test_widths.py checks it).
NO_CUT_CSS = """<style>
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] *,
[data-testid="stMetricValue"], [data-testid="stMetricValue"] *,
[data-testid="stMetricDelta"], [data-testid="stMetricDelta"] *,
[data-testid="stMain"] button, [data-testid="stMain"] button * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
  overflow-wrap: break-word;
}
@media (max-width: 1500px) {
  [data-testid="stMetricValue"] { font-size: 1.6rem !important; }
  [data-testid="stMainBlockContainer"] { padding-left: 2rem !important; padding-right: 2rem !important; }
}
/* a long token (a URL, a path) breaks inside a table cell rather than push columns out of sight */
[data-testid="stTable"] td, [data-testid="stTable"] th, [data-testid="stTable"] td * {
  white-space: normal !important; word-break: break-word;
}
/* a row of columns too narrow for its metrics wraps onto a second line */
[data-testid="stMain"] [data-testid="stHorizontalBlock"] { flex-wrap: wrap; row-gap: 0.75rem; }
[data-testid="stMain"] [data-testid="stColumn"] { min-width: min(7.5rem, 100%); }
</style>"""


def page_header(title: str, purpose: str) -> None:
    st.html(NO_CUT_CSS)
    st.title(title)
    st.caption(purpose)


def store_banner(rt, *, show_paths: bool) -> None:
    """A red banner while the workspace's state store is damaged or cannot be written: what is
    wrong and what to do (the file's path only for a session that may see the workspace's paths),
    and, while writes are refused, that the supervisor keeps supervising from memory."""
    store = getattr(rt, "store", None)
    if store is None:
        return
    h = store.health()
    if h.ok:
        return
    sup = getattr(rt, "supervisor", None)
    held = sup.memory_note() if sup is not None else None
    if h.state == "corrupt":
        head = "**The state store is damaged**: pages that read it may fail and nothing new is saved."
    else:
        head = ("**The state store cannot be written**: the supervisor keeps supervising from memory "
                "(process states shown are current) and saves them once it can write again.")
    lines = [head]
    if show_paths:
        lines.append(f"{code_span(h.path)}: {h.problem}")
        lines.append(f"**What to do:** {h.remedy}")
    else:
        lines.append("An operator who may see the workspace's files has the details (also in the dashboard's log).")
    if held:
        lines.append(held[0].upper() + held[1:] + ".")
    st.error(fmt.data_markdown("\n\n".join(lines)), icon=":material/database:")


def freshness(updated_at: float | None, interval_s: float, what: str = "updated") -> None:
    """'updated N s ago'; amber with a warning once older than three intervals."""
    if updated_at is None:
        st.caption(f":orange[{what}: no data yet]")
        return
    age = max(0.0, time.time() - updated_at)
    text = f"{what} {fmt.age(age)}"
    if age > 3 * interval_s:
        st.caption(f":orange[⚠ {text} — stale (expected every {interval_s:.0f} s)]")
    else:
        st.caption(text)


def code_span(text: object) -> str:
    """``text`` as one Markdown code span whatever backticks it holds (a path, a log line), for a string
    that then goes through ``fmt.data_markdown`` (a newline in ``text`` may still end the span)."""
    s = str(text)
    longest, run = 0, 0
    for ch in s:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * (longest + 1)
    pad = " " if s.startswith(("`", " ")) or s.endswith(("`", " ")) else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def path_text(path: object, hidden: bool) -> str:
    """A workspace path for Markdown: in a code span, or a word in its place for a session that may
    not see the workspace's paths (``hidden``: ``bool(ui.auth.data_lock(rt))``)."""
    return "*(path hidden)*" if hidden else code_span(path)


def state_badge(state: str | None, exit_code: int | None = None) -> None:
    st.markdown(fmt.state_badge(state, exit_code).markdown())


def confirm_box(key: str, question: str, *, confirm_label: str = "Confirm",
                danger: bool = True) -> bool | None:
    """Inline confirmation shown after a control button was pressed.

    Returns True when confirmed, False when cancelled, None while waiting.
    The caller arms it with ``st.session_state[key] = True``.
    """
    if not st.session_state.get(key):
        return None
    box = st.empty()
    with box.container(border=True):
        st.warning(question, icon=":material/warning:" if danger else ":material/info:")
        row = st.container(horizontal=True)
        answer = None
        if row.button(confirm_label, key=f"{key}-yes", type="primary"):
            answer = True
        elif row.button("Cancel", key=f"{key}-no"):
            answer = False
    if answer is not None:  # answered: the question goes away at once
        st.session_state[key] = False
        box.empty()
    return answer


def stop_control(rt, view, *, key: str, question: str, done: str, label: str = "Stop", help: str,
                 disabled: bool = False) -> None:
    """A supervised job's Stop button and its confirmation: the button (key ``{key}-stop``) arms the
    question (``{key}-confirm-stop``); a Yes stops ``view``'s process as the session's user, with
    ``done`` as a toast, or says why it could not.  Disabled while the session may not control."""
    lock = control_lock(rt)
    if st.button(label, key=f"{key}-stop", icon=":material/stop:", disabled=disabled or bool(lock),
                 help=lock or help):
        st.session_state[f"{key}-confirm-stop"] = True
    if confirm_box(f"{key}-confirm-stop", question, confirm_label="Yes, stop") is True:
        try:
            rt.stop(view.name, actor=actor(), source="dashboard")
        except Exception as exc:  # refused or failed: the audit log has it
            st.error(f"Could not stop {view.name}: {exc}")
        else:
            st.toast(done, icon=":material/check_circle:")


# st.code's look (monospace on the light theme's grey) for text drawn as HTML by text_block
TEXT_BLOCK_STYLE = ("margin:0 0 1rem 0;padding:0.75rem 1rem;border-radius:0.5rem;background:#f0f2f6;color:#31333f;"
                    "font-family:'Source Code Pro',monospace;font-size:0.85rem;line-height:1.55;white-space:pre-wrap;"
                    "overflow-wrap:anywhere;")


def text_block(text: str, *, height: int | None = None) -> None:
    """``text`` as it is (a log tail, a failed row's answer), monospaced on grey as st.code shows it, drawn as
    HTML (escaped: nothing in it is markup), scrolling past ``height`` pixels.  Where no copy button is
    needed it stands in for st.code: a page's first st.code loads and starts the browser's syntax highlighter,
    130-160 ms of the browser's time before the page's first chart shows (profiled on Servers, Regeneration
    and Training at full scale)."""
    style = TEXT_BLOCK_STYLE + (f"max-height:{int(height)}px;overflow:auto;" if height else "")
    st.html(f'<pre class="specdeck-text" style="{style}">{html.escape(text)}</pre>')


def open_expander(label: str, *, key: str, **kwargs):
    """An expander whose content is built only while it is open: the container to draw into when open, else
    None.  Opening or closing it runs the page again (``on_change="rerun"``), so what is behind a closed one
    (a form of dozens of fields, a code block, a long log) is neither built, sent nor drawn; ``key`` keeps
    whether it is open across runs; ``kwargs`` go to ``st.expander`` (``expanded``, ``icon``)."""
    box = st.expander(label, key=key, on_change="rerun", **kwargs)
    return box if box.open else None


def log_block(lines: list[str], *, newest_age_s: float | None, toggle_key: str, latest: int = 15,
              earlier: int = 200, earlier_key: str | None = None) -> None:
    """A log tail with the newest lines where the eye lands.

    The last ``latest`` lines show in full (no scrolling, newest at the bottom),
    under a caption saying how old the newest line is; up to ``earlier`` lines
    before them sit in an expander, built and sent only while it is open
    (``earlier_key``, by default ``toggle_key`` + "-earlier", keeps its state; opening
    it runs the page or fragment again).  The dashboard's own /health, /metrics and
    /server_info requests are hidden unless the toggle is on.
    """
    from backend.logview import filter_probe_lines

    show = st.toggle("Show the dashboard's own /health, /metrics and /server_info requests",
                     key=toggle_key)
    view = filter_probe_lines(lines, show_probes=show)
    shown = view.lines
    age_text = "no line yet" if newest_age_s is None else f"newest line written {fmt.age(newest_age_s)}"
    hidden = f" · {fmt.count(view.hidden)} probe request line(s) hidden" if view.hidden else ""
    st.caption(f"Latest {min(latest, len(shown))} of {fmt.count(len(shown))} lines · {age_text}{hidden}")
    text_block("\n".join(shown[-latest:]) or "(log is empty)")
    before = shown[:-latest][-earlier:]
    if before:
        # closed, it holds nothing: a 200-line code block behind it cost the browser's highlighter
        # about 366 ms on each Servers visit and again at each refresh of the log.  Its label (with the
        # count) is part of its identity, so a growing log would close it: it starts as it was left.
        key = earlier_key or f"{toggle_key}-earlier"
        box = open_expander(f"Earlier lines ({fmt.count(len(before))})", key=key,
                            expanded=bool(st.session_state.get(key)))
        if box is not None:
            with box:
                text_block("\n".join(before), height=320)


def findings_list(findings, *, info: bool = True) -> None:
    """Preflight findings in full: errors and warnings as callouts, info as a list.

    Their words are the point, so nothing is cut to fit a table cell.
    """
    for f in findings:
        if f.severity in ("error", "warning"):
            (st.error if f.severity == "error" else st.warning)(
                fmt.data_markdown(f"**{f.code}**: {f.found}\n\n**Fix:** {f.fix}"),
                icon=":material/error:" if f.severity == "error" else ":material/warning:")
    notes = [f for f in findings if f.severity not in ("error", "warning")]
    if info and notes:
        st.markdown(fmt.data_markdown("\n".join(f"- ○ **{f.code}**: {f.found}" + (f" *Fix:* {f.fix}" if f.fix else "")
                                                 for f in notes)))


_ALERT_BOX = {"error": st.error, "warning": st.warning, "info": st.info}


def alerts_panel(rt, *, key: str = "alerts") -> None:
    """The alerts engine's active alerts, errors first: each with its time, what to do and a link to its
    page, and Acknowledge and Mute (its rule for 4 h) buttons; then the notification channels and a
    button that sends them a test.  Every action is authorised and audited through ``rt.act``."""
    engine = getattr(rt, "alerts", None)
    if engine is None:
        return
    lock = control_lock(rt)
    now = time.time()
    shown = engine.visible(now)
    if not shown:
        st.caption("No active alerts.")
    for rec in shown:
        age = fmt.duration(now - rec.fired_at)
        _ALERT_BOX.get(rec.severity, st.warning)(
            f"**{rec.title}**  \n{rec.action}  \n[open]({rec.link}) · since "
            f"{time.strftime('%H:%M', time.localtime(rec.fired_at))} ({age} ago)")
        left, right = st.columns(2)
        # callbacks: the action is done before the panel is drawn again, so the list follows it
        left.button("Acknowledge", key=f"{key}-ack-{rec.id}", disabled=bool(lock),
                    help=lock or "Hide it here and send no more notifications about it",
                    on_click=_alert_action, args=(rt, "alert-ack", f"#{rec.id}", _ack(engine, rec.id),
                                                  f"#{rec.id} acknowledged"))
        right.button("Mute 4 h", key=f"{key}-mute-{rec.id}", disabled=bool(lock),
                     help=lock or f"Mute every {rec.rule} alert for 4 hours",
                     on_click=_alert_action, args=(rt, "alert-mute", rec.rule, _mute(engine, rec.rule, 4.0),
                                                   f"{rec.rule} muted for 4 h"))
    channels = engine.notifier.channels()
    st.caption("Notifications: " + ("; ".join(channels) if channels else
                                    "none (set webhook = \"URL\" or command = [...] under [alerts] in the workspace file)"))
    st.button("Send a test notification", key=f"{key}-test", disabled=bool(lock) or not channels,
              help=lock or "Send a test message to the webhook and command under [alerts]",
              on_click=_alert_action, args=(rt, "alert-test", "notifications", _test(engine), None))


def _ack(engine, alert_id: int):
    return lambda who: (True, f"acknowledged {engine.alerts.ack(alert_id, who).key}")


def _mute(engine, rule: str, hours: float):
    def mute(who: str):
        m = engine.alerts.mute(rule, time.time() + hours * 3600, who)
        return True, f"muted until {time.strftime('%Y-%m-%d %H:%M', time.localtime(m.until))}"
    return mute


def _test(engine):
    def test(who: str):
        sent = engine.test()
        return bool(sent) and all(d.ok for d in sent), "; ".join(
            f"{d.channel}: {'sent' if d.ok else 'FAILED'} ({d.detail})" for d in sent)
    return test


def _alert_action(rt, action: str, target: str, fn, done: str | None) -> None:
    """``fn(name of the user)`` authorised and audited as ``action`` on ``target``."""
    caller = actor()
    try:
        who, _ = rt.authorise(caller, action, target, "dashboard")
        ok, message = rt.act(action, target, lambda: fn(who), actor=caller, source="dashboard")
    except Exception as exc:  # refused or failed: the audit log has it
        st.error(f"Could not {action.removeprefix('alert-')} {target}: {exc}")
        return
    if not ok:
        st.error(message)
    else:
        st.toast(done or message, icon=":material/check_circle:")
