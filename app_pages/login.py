"""Sign in: the form that unlocks control actions when the dashboard is reachable from the network."""

from __future__ import annotations

from ui.auth import login_page
from ui.context import runtime

login_page(runtime())
