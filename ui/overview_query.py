"""A page's state in the URL query, so that a view can be reloaded and shared as a link (and the Overview's
tiles can open a page on a run or a tab).

Before a widget is drawn, :meth:`QueryState.take` puts a value the URL brings (a link opened, a reload) into
the widget's session state, when it is one of the widget's options; a value that is not is ignored and
named in :meth:`QueryState.notes`, never raised.  After the widgets, :meth:`QueryState.put` writes the state
they show back into the URL (a parameter at its default is left out).  A value is taken once: what the page
wrote itself, or a value already taken, is not taken again, so the widgets stay the user's.
"""

from __future__ import annotations

from typing import Any, Sequence

import streamlit as st


class QueryState:
    def __init__(self, page: str):
        self.page = page
        self._notes: list[str] = []

    def _seen_key(self, param: str) -> str:
        return f"_query-{self.page}-{param}"

    def _raw(self, param: str) -> list[str]:
        try:
            return [str(v) for v in st.query_params.get_all(param)]
        except Exception:  # a malformed query string: nothing to take
            return []

    def take(self, param: str, key: str, options: Sequence[Any], *, multi: bool = False,
             what: str = "choice") -> Any:
        """Put ``?param=`` into ``st.session_state[key]`` when the URL brings a new value.  ``options``: the
        widget's options (compared as text); ``what``: their name in a note.  Returns the value taken, or None."""
        raw = self._raw(param)
        seen = self._seen_key(param)
        if not raw or st.session_state.get(seen) == raw:
            return None
        st.session_state[seen] = raw
        by_text = {str(o): o for o in options}
        good = [by_text[v] for v in raw if v in by_text]
        bad = [v for v in raw if v not in by_text]
        if bad:
            shown = ", ".join(repr(v[:60]) for v in bad[:3])
            self._notes.append(f"`{param}={bad[0][:60]}`" if len(bad) == 1 else f"`{param}`: {shown}")
            self._notes[-1] += f" is not a {what} here: ignored"
        if multi:
            if good or not bad:
                st.session_state[key] = list(dict.fromkeys(good))
                return st.session_state[key]
            return None
        if good:
            st.session_state[key] = good[-1]
            return good[-1]
        return None

    def put(self, param: str, value: Any, *, default: Any = None) -> None:
        """The URL says ``value`` (a list: the parameter repeated); at ``default`` or empty it is left out."""
        empty = value is None or value == default or (isinstance(value, (list, tuple)) and not value)
        written = [] if empty else [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
        if self._raw(param) != written:
            if written:
                st.query_params[param] = written if len(written) > 1 else written[0]
            else:
                st.query_params.pop(param, None)
        st.session_state[self._seen_key(param)] = written or None

    def notes(self) -> list[str]:
        return list(self._notes)

    def show_notes(self) -> None:
        """One amber line naming the link's values that were ignored."""
        if self._notes:
            st.caption(":orange[⚠ From the link: " + "; ".join(self._notes) + ".]")
