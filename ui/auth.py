"""Sign-in in the page layer: who is asking, the frame's gate, and the locks on controls and data.

The backend decides (``backend.auth``); this module only reads what Streamlit
knows about the request (the listening address from its config, the browser
session's TCP peer from ``st.context``, the loopback token in the URL) and
draws the gate, the banner, the sign-in page and the account box.

For the pages:

- :func:`runtime` / :func:`actor` (the pages take them from ``ui.context``): the
  workspace's runtime, with the page gated on what this session may view, and who asks;
- :func:`control_lock` / :func:`data_lock`: why this session may not act, or
  may not see prompts, answers, logs and command lines ("" when it may);
- :func:`live_fragment`: ``st.fragment(run_every=...)`` that stops drawing
  (and sends the tab through the gate again) once the session may no longer view;
- :func:`typed_path`: a path typed in a widget, resolved and allowed by the
  backend (an operator action, under the workspace's roots), or an error on the page.
"""

from __future__ import annotations

import functools
import hmac
import logging
import os
import threading
import time
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitAPIException
from streamlit.runtime.scriptrunner import get_script_run_ctx

from backend.auth import ABSOLUTE_S, IDLE_S, Access, Caller, LoginRefused, NotAuthorised, PathRefused, is_loopback
from backend.runtime import Runtime, get_runtime
from backend.workspace import ConfigError

log = logging.getLogger("specdeck")

TOKEN_KEY = "_specdeck_auth_token"
NOTICE_KEY = "_specdeck_auth_notice"
HOME_KEY = "_specdeck_home_page"
LOCAL_TOKEN_KEY = "_specdeck_local_token"
FORWARDING_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
_warned: set[str] = set()


def listen_address() -> str:
    """The address the dashboard listens on ("" = all interfaces), from Streamlit's effective config."""
    return str(st.get_option("server.address") or "")


def _served_client_context():
    """(client context of this session, True) under a real Streamlit server; (None, False) without one."""
    ctx = get_script_run_ctx()
    if ctx is None:
        return None, False
    from streamlit import runtime as st_runtime
    from streamlit.runtime import Runtime as StreamlitRuntime

    if not st_runtime.exists():
        return None, False
    inst = st_runtime.get_instance()
    if type(inst) is not StreamlitRuntime:
        return None, False  # a test harness (AppTest's stand-in) instead of a server: no network peer
    client = inst.get_client(ctx.session_id)
    return (getattr(client, "client_context", None) if client is not None else None), True


def peer_address() -> str:
    """The browser session's TCP peer: "" without a server, "unknown" when it cannot be read.

    ``st.context.ip_address`` gives the peer but hides loopback as None, so a
    None is checked against the session's own client context (the same TCP
    peer); the Host header is never consulted."""
    cc, served = _served_client_context()
    if not served:
        return ""
    ip = st.context.ip_address
    if isinstance(ip, str) and ip:
        return ip
    raw = getattr(cc, "remote_ip", None) if cc is not None else None
    return raw if isinstance(raw, str) and raw else "unknown"


def caller() -> Caller:
    """This request, in plain values for the backend."""
    headers = st.context.headers
    proxied = any(headers.get(h) for h in FORWARDING_HEADERS) if headers else False
    return Caller(listen=listen_address(), peer=peer_address(), token=st.session_state.get(TOKEN_KEY),
                  proxied=proxied, forwarded_allow_ips=os.environ.get("FORWARDED_ALLOW_IPS"),
                  local_token=st.session_state.get(LOCAL_TOKEN_KEY))


def _may_see_startup_error() -> bool:
    """Whether a backend that could not start may say why to this session: the text names files of
    the workspace, so only to a browser on this host that carries the dashboard's token (nobody
    can sign in without a backend)."""
    c = caller()
    if c.exposed:
        return False
    want = os.environ.get("SPECDECK_ACCESS_TOKEN") or ""
    if c.peer == "" or not want:
        return c.peer == ""
    got = st.session_state.get(LOCAL_TOKEN_KEY) or st.query_params.get("token") or ""
    return hmac.compare_digest(str(got).encode(), want.encode())


def runtime(*, show_config_error: bool = False, gate: bool = True) -> Runtime:
    """The runtime, or a clear error on the page (and st.stop) when it cannot start.

    The frame (app.py) passes ``show_config_error`` so a broken edit of the
    workspace file is shown once per page, above the page.  With ``gate`` (every
    page), a session that may not view stops here: the frame has drawn the
    sign-in page instead (this holds a page that runs without the frame too).
    """
    try:
        rt = get_runtime()
    except ConfigError as exc:
        log.error("the workspace config has problems:\n%s", exc)
        if not _may_see_startup_error():
            st.error("**The dashboard cannot start**: its workspace config has problems. They are listed "
                     "in the terminal that runs the dashboard.")
            st.stop()
        st.error("**The workspace config has problems**, so nothing was started:")
        st.code(str(exc), language=None)
        st.caption("Fix the file and reload the page. Each line names the file, line and key.")
        st.stop()
        raise  # unreachable; keeps type checkers happy
    except Exception as exc:  # a locked or damaged state file, a full disk, ...
        log.exception("the dashboard's backend could not start")
        if not _may_see_startup_error():
            st.error("**The dashboard's backend could not start.** The reason is in the terminal that runs it.")
            st.stop()
        st.error(f"**The dashboard's backend could not start**: {type(exc).__name__}: {exc}")
        st.caption("Likely causes: the state file is locked by another program or damaged, or the disk "
                   "is full. The full traceback is in the terminal that runs the dashboard.")
        st.stop()
        raise
    if gate or show_config_error:
        acc = access(rt)
        if gate and not acc.can_view:
            ctx = get_script_run_ctx()
            if ctx is not None and Path(ctx.main_script_path).name == "app.py":
                # the session may no longer view, found after the frame's gate (a live part's timed run, a
                # sign-out meanwhile): the whole page runs again, and the frame's gate draws the sign-in page
                if acc.notice:  # the frame's own check would only find the session gone
                    st.session_state.pop(TOKEN_KEY, None)
                    st.session_state[NOTICE_KEY] = acc.notice
                st.rerun(scope="app")
            st.stop()
        show_config_error = show_config_error and acc.can_see_data
    if show_config_error and rt.config_error is not None:
        st.warning("**The workspace file was edited and has problems**; the dashboard keeps using the "
                   "last good config until they are fixed:", icon=":material/warning:")
        st.code(str(rt.config_error), language=None)
    return rt


def actor() -> Caller:
    """Who asks, for the runtime's control methods: they decide whether this session may act
    and whom the audit names (the signed-in user, or ``local`` on loopback)."""
    return caller()


def access(rt, *, touch: bool = False) -> Access:
    """What this request may do in the runtime ``rt``, as the backend decides it."""
    return rt.auth.access(caller(), touch=touch)


def control_lock(rt) -> str:
    """Why this session may not control ("" when it may): pass as ``help=`` and ``disabled=bool(...)``.

    Disabling a widget is a courtesy: the backend refuses the action itself."""
    return access(rt).reason


def data_lock(rt) -> str:
    """Why this session may not see prompts, answers, log lines, command lines, the audit log or
    the workspace's paths ("" when it may): show it in their place."""
    return access(rt).data_reason


def show_data_lock(rt) -> bool:
    """True (after a caption saying why) when data is hidden from this session: ``if show_data_lock(): return``."""
    why = data_lock(rt)
    if why:
        st.caption(f":material/lock: {why}")
    return bool(why)


def live_fragment(fn=None, *, run_every=None):
    """``st.fragment(run_every=...)`` for live panels: each timed run first checks that the session
    may still view (a session that ended, a user removed); if not, the whole page runs again, and
    the frame's gate shows the sign-in page instead of the panel."""
    def wrap(f):
        @functools.wraps(f)
        def guarded(*args, **kwargs):
            if not access(runtime(gate=False)).can_view:
                st.rerun(scope="app")
            return f(*args, **kwargs)

        return st.fragment(guarded, run_every=run_every)

    return wrap(fn) if fn is not None else wrap


def fragment_run() -> bool:
    """Whether this run draws live parts only (a fragment's timed run; the rest of the page stays as the last
    full run drew it).  A live part drawn within a full run (a click, a choice) need not run the page again
    for news it finds: the run it is part of draws the rest of the page after it."""
    ctx = get_script_run_ctx()
    return bool(ctx is not None and ctx.fragment_ids_this_run)


def typed_path(rt, typed: str, *, action: str = "read") -> Path | None:
    """The path typed in a widget, resolved, when the backend allows this session to read it
    (an operator action, under the workspace's roots); else None after an error that says why."""
    try:
        return rt.typed_path(actor(), typed, action=action, source="dashboard")
    except (NotAuthorised, PathRefused) as exc:
        st.error(str(exc), icon=":material/lock:")
        return None


def _warn_once(rt, acc: Access) -> None:
    listen = listen_address()
    key = f"{rt.workspace.root}|{listen}"
    if key in _warned or acc.mode == "local":
        return
    _warned.add(key)
    if acc.mode == "token":
        log.warning("Specdeck asks each browser for its token: open http://localhost:%s/?token=%s "
                    "(also in %s)", st.get_option("server.port"), rt.access_token,
                    rt.workspace.run_dir / "dashboard-token")
        return
    n = len(rt.auth.users.users())
    log.warning("Specdeck listens on %s, reachable from the network: browsers see %s until a user signs in, "
                "and control needs a signed-in operator (%d users in %s)%s", listen or "all interfaces",
                "figures only (anonymous_view)" if acc.anonymous_view else "nothing but the sign-in page", n,
                rt.auth.users.path, "" if n else "; add one with `" + rt.auth.add_user_hint() + "`")
    hosts = [h for h in (st.get_option("server.allowedHosts") or []) if h != "*"]
    if hosts and all(is_loopback(h) for h in hosts):
        log.warning("server.allowedHosts lists only %s: browsers that reach the dashboard by another name or "
                    "address are refused until it lists that too (--server.allowedHosts NAME)", ", ".join(hosts))


def acc_was_viewable(rt, c: Caller) -> bool:
    """Whether the session could view before signing in: then the sign-in page was one page of the
    navigation and the frame's first page follows; else the URL's own page opens."""
    from dataclasses import replace

    return rt.auth.access(replace(c, token=None)).can_view


def _sign_in_form(rt, c: Caller) -> None:
    with st.form("specdeck-login", border=True):
        name = st.text_input("User name", key="login-name", autocomplete="username")
        password = st.text_input("Password", type="password", key="login-password",
                                 autocomplete="current-password")
        submitted = st.form_submit_button("Sign in", type="primary", icon=":material/login:")
    if submitted:
        try:
            s = rt.auth.login(c, name, password)
        except LoginRefused as exc:
            st.error(str(exc), icon=":material/error:")
        else:
            st.session_state[TOKEN_KEY] = s.token
            st.session_state.pop(NOTICE_KEY, None)
            home = st.session_state.get(HOME_KEY)
            if home is not None and acc_was_viewable(rt, c):
                try:
                    st.switch_page(home)
                except StreamlitAPIException:  # a page of an earlier navigation: stay on this URL
                    pass
            st.rerun()


def _token_form(rt) -> None:
    with st.form("specdeck-token", border=True):
        token = st.text_input("Token", type="password", key="login-token", autocomplete="off",
                              help="The `token=` part of the URL the dashboard printed when it started; it is also "
                                   "in the file run/dashboard-token of its workspace (readable only by its user).")
        submitted = st.form_submit_button("Open", type="primary", icon=":material/key:")
    if submitted:
        if rt.auth.token_matches(token.strip()):
            st.session_state[LOCAL_TOKEN_KEY] = token.strip()
            st.rerun()
        st.error("That is not this dashboard's token.", icon=":material/error:")


def login_page(rt) -> None:
    """The sign-in page (pages/login.py, and the only page a session that may not view gets)."""
    acc = access(rt)
    c = caller()
    if acc.mode == "token":
        st.title("Open Specdeck")
        st.caption("This dashboard listens on this machine only, and each browser opens it once with the token "
                   "in the URL it printed at its start, as Jupyter does: another user of the machine, a page on "
                   "another localhost port or a port forwarder sees nothing without it.")
    else:
        st.title("Sign in")
        if not acc.can_view:
            st.caption("This dashboard is reachable from the network: sign in to see it. Viewers see everything; "
                       "operators also start, stop and relaunch.")
        else:
            st.caption("Starting, stopping and relaunching need a signed-in operator while the dashboard is "
                       "reachable from the network.")
    left, _ = st.columns([2, 3])
    with left:
        if acc.mode == "signed-in":
            st.success(f"Signed in as **{acc.actor}** ({acc.role}).", icon=":material/check_circle:")
            return
        if acc.mode == "token":
            _token_form(rt)
        if acc.users_error and not acc.can_see_data:
            st.error("Nobody can sign in: the users file has an error (see the dashboard's terminal).",
                     icon=":material/error:")
        elif acc.users_error:
            st.error(f"Nobody can sign in: {acc.users_error}", icon=":material/error:")
        if acc.can_sign_in:
            if acc.mode == "token":
                st.caption("Or sign in:")
            _sign_in_form(rt, c)
        elif acc.mode != "token":
            st.warning("No user is configured, so nobody can sign in. Add one on the dashboard's host: "
                       "`python -m backend.cli --workspace WORKSPACE users add NAME --role operator`.",
                       icon=":material/person_add:")
        hint = rt.auth.add_user_hint() if acc.can_see_data else \
            "python -m backend.cli --workspace WORKSPACE users add NAME"
        st.caption(f"A session ends after {IDLE_S // 60} min without activity and {ABSOLUTE_S // 3600} h "
                   "after signing in; reloading the tab signs out. Users are added on the dashboard's host: "
                   f"`{hint}`.")


# -- the frame's gate ----------------------------------------------------------

_sessions_lock = threading.Lock()
_first_seen: dict[str, float] = {}  # browser session id -> when the gate first saw it


def _take_url_token(rt) -> None:
    """A ``?token=`` in the URL: kept in the session when it is this dashboard's, and taken out of
    the address bar either way (it should not stay in the browser's history)."""
    presented = st.query_params.get("token")
    if presented is None:
        return
    if rt.auth.token_matches(presented):
        st.session_state[LOCAL_TOKEN_KEY] = presented
    if "token" in st.query_params:
        del st.query_params["token"]


def _session_ip(info) -> str | None:
    cc = getattr(getattr(info, "client", None), "client_context", None)
    ip = getattr(cc, "remote_ip", None)
    return ip if isinstance(ip, str) else None


def too_many_sessions(limit: int) -> str:
    """Why this browser session is refused ("" when it is not): more than ``limit`` sessions are
    open from its address, and it is not among the ``limit`` that ran first.  A refused session
    stops before drawing anything or starting a timed refresh, so it costs next to nothing."""
    ctx = get_script_run_ctx()
    cc, served = _served_client_context()
    if not served or ctx is None:
        return ""
    mine = getattr(cc, "remote_ip", None)
    from streamlit import runtime as st_runtime

    mgr = getattr(st_runtime.get_instance(), "_session_mgr", None)
    if mgr is None or mine is None:
        return ""
    for _ in range(3):  # the list is read from the server's thread while sessions come and go
        try:
            infos = list(mgr.list_active_sessions())
            break
        except RuntimeError:
            continue
    else:
        return ""
    now = time.monotonic()
    alive = {info.session.id for info in infos}
    same = [info.session.id for info in infos if _session_ip(info) == mine]
    with _sessions_lock:
        for sid in [sid for sid in _first_seen if sid not in alive]:
            del _first_seen[sid]
        _first_seen.setdefault(ctx.session_id, now)
        # sessions rank by their first run through the gate; one that has not run yet holds no place
        ranked = sorted((sid for sid in same if sid in _first_seen), key=lambda sid: (_first_seen[sid], sid))
    if ctx.session_id in ranked[:limit]:
        return ""
    return (f"Too many open dashboard sessions from your address ({len(same)}; the limit is {limit}). "
            "Close other tabs of this dashboard and reload this one.")


def gate(rt, url_paths: list[str] = ()) -> Access:
    """The frame's first call on every run: a session that may not view the dashboard gets the
    sign-in page (or the token page) and nothing else, with no sidebar and no navigation; the run
    stops here.  The sign-in page answers at every page's URL (``url_paths``), so a bookmarked
    page asks for the sign-in and opens after it.  Also takes a ``?token=`` from the URL and holds
    the sessions per address."""
    _take_url_token(rt)
    acc = access(rt, touch=True)
    _warn_once(rt, acc)
    crowded = too_many_sessions(rt.workspace.config.access.sessions_per_address)
    if crowded:
        st.error(crowded, icon=":material/block:")
        st.stop()
    if not acc.can_view:
        notice = st.session_state.pop(NOTICE_KEY, None) or acc.notice
        if acc.notice:
            st.session_state.pop(TOKEN_KEY, None)
        if notice:
            st.info(notice, icon=":material/logout:")
        pages = [st.Page(functools.partial(login_page, rt), title="Sign in", icon=":material/login:",
                         url_path=path, default=not i)
                 for i, path in enumerate(["login", *(p for p in url_paths if p and p != "login")])]
        st.navigation(pages, position="hidden").run()
        st.stop()
    return acc


def frame_gate(rt, pages: list) -> list:
    """The frame's part: a banner on every page when control is locked, the account box in the
    sidebar, and the pages to add to the navigation (the sign-in page while it is useful)."""
    acc = access(rt, touch=True)
    _warn_once(rt, acc)
    if acc.notice:
        st.session_state.pop(TOKEN_KEY, None)
        st.session_state[NOTICE_KEY] = acc.notice
    if pages:
        st.session_state[HOME_KEY] = pages[0]
    extra = []
    login = None
    if acc.can_sign_in and acc.mode != "signed-in" and pages:
        login = st.Page("app_pages/login.py", title="Sign in", icon=":material/login:", url_path="login")
        extra.append(login)
    notice = st.session_state.pop(NOTICE_KEY, None)  # shown once
    if notice and acc.mode != "signed-in":
        st.info(notice + " Sign in again to control.", icon=":material/logout:")
    if acc.mode == "read-only":
        st.error(acc.reason, icon=":material/lock:")
    elif acc.mode == "sign-in":
        st.warning(acc.reason, icon=":material/lock:")
    if acc.users_error and acc.mode != "read-only" and acc.can_see_data:
        st.error(f"Nobody can sign in: {acc.users_error}", icon=":material/error:")
    with st.sidebar:
        if acc.mode == "signed-in":
            sessions = rt.auth.sessions
            last = time.strftime("%H:%M", time.localtime(acc.session.started_at + sessions.absolute_s))
            role = "" if acc.role == "operator" else f" (**{acc.role}**: sees everything, acts on nothing)"
            st.caption(f"Signed in as **{acc.actor}**{role} from {acc.client} · signed out after "
                       f"{sessions.idle_s / 60:g} min without activity, at {last} at the latest")
            if st.button("Sign out", key="specdeck-logout", icon=":material/logout:"):
                rt.auth.logout(caller())
                st.session_state.pop(TOKEN_KEY, None)
                st.rerun()
        elif login is not None:
            st.page_link(login, label="Sign in to control" if acc.mode != "local"
                         else "Sign in (the audit then names you)", icon=":material/login:")
        elif acc.mode == "local":
            st.caption("Local session: controls need no sign-in (audited as *local*).")
        else:
            st.caption(":red[Read-only] · no user configured")
    return extra

