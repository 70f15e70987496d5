"""Sign-in in the page layer: who is asking, the frame's gate, and the lock on control buttons.

The backend decides (``backend.auth``); this module only reads what Streamlit
knows about the request (the listening address from its config, the browser
session's TCP peer from ``st.context``) and draws the banner, the sign-in
page and the account box.
"""

from __future__ import annotations

import logging
import os
import time

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from backend.auth import ABSOLUTE_S, IDLE_S, Access, Caller, LoginRefused, is_loopback

log = logging.getLogger("specdeck")

TOKEN_KEY = "_specdeck_auth_token"
NOTICE_KEY = "_specdeck_auth_notice"
HOME_KEY = "_specdeck_home_page"
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
                  proxied=proxied, forwarded_allow_ips=os.environ.get("FORWARDED_ALLOW_IPS"))


def access(rt=None, *, touch: bool = False) -> Access:
    from ui.context import runtime

    rt = rt or runtime()
    return rt.auth.access(caller(), touch=touch)


def control_lock(rt=None) -> str:
    """Why this session may not control ("" when it may): pass as ``help=`` and ``disabled=bool(...)``."""
    return access(rt).reason


def _warn_once(rt, acc: Access) -> None:
    listen = listen_address()
    key = f"{rt.workspace.root}|{listen}"
    if key in _warned or acc.mode == "local":
        return
    _warned.add(key)
    n = len(rt.auth.users.users())
    log.warning("Specdeck listens on %s, reachable from the network: control actions need a signed-in user "
                "(%d configured in %s)%s", listen or "all interfaces", n, rt.auth.users.path,
                "" if n else "; the dashboard is read-only until one is added")
    hosts = [h for h in (st.get_option("server.allowedHosts") or []) if h != "*"]
    if hosts and all(is_loopback(h) for h in hosts):
        log.warning("server.allowedHosts lists only %s: browsers that reach the dashboard by another name or "
                    "address are refused until it lists that too (--server.allowedHosts NAME)", ", ".join(hosts))


def login_page(rt) -> None:
    """The sign-in page (pages/login.py)."""
    st.title("Sign in")
    acc = access(rt)
    c = caller()
    st.caption("Starting, stopping and relaunching need a signed-in user while the dashboard is reachable "
               "from the network; viewing does not.")
    left, _ = st.columns([2, 3])
    with left:
        if acc.mode == "signed-in":
            st.success(f"Signed in as **{acc.actor}**.", icon=":material/check_circle:")
            return
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
                if home is not None:
                    st.switch_page(home)
                st.rerun()
        st.caption(f"A session ends after {IDLE_S // 60} min without activity and {ABSOLUTE_S // 3600} h "
                   "after signing in; reloading the tab signs out. Users are added on the dashboard's host: "
                   f"`{rt.auth.add_user_hint()}`.")


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
        login = st.Page("pages/login.py", title="Sign in", icon=":material/login:", url_path="login")
        extra.append(login)
    notice = st.session_state.pop(NOTICE_KEY, None)  # shown once
    if notice and acc.mode != "signed-in":
        st.info(notice + " Sign in again to control.", icon=":material/logout:")
    if acc.mode == "read-only":
        st.error(acc.reason, icon=":material/lock:")
    elif acc.mode == "sign-in":
        st.warning(acc.reason, icon=":material/lock:")
    if acc.users_error and acc.mode != "read-only":
        st.error(f"Nobody can sign in: {acc.users_error}", icon=":material/error:")
    with st.sidebar:
        if acc.mode == "signed-in":
            sessions = rt.auth.sessions
            last = time.strftime("%H:%M", time.localtime(acc.session.started_at + sessions.absolute_s))
            st.caption(f"Signed in as **{acc.actor}** from {acc.client} · signed out after "
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

