"""The browser tests' shared dashboard: one `streamlit run app.py` on the demo workspace for every test
that only reads it or acts on it the way a user would and leaves it as it found it (a relaunched server
comes back in the same configuration).  A test that needs a server of its own (a first visit, another
workspace, another address) starts one with :func:`tests.e2e._dashboard.serve`."""

from __future__ import annotations

import pytest

from tests.e2e._dashboard import DEMO_ENV, serve


@pytest.fixture(scope="session")
def demo_dashboard(tmp_path_factory):
    """The demo workspace's dashboard (a :class:`tests.e2e._dashboard.DashboardURL`), warmed: its first
    run is done and the demo's processes are started.  Its simulated servers load at 50 times the real
    pace (``DEMO_ENV``): a test meets the 70B demo server running, as a user does a minute later."""
    with serve(tmp_path_factory.mktemp("demo-dashboard"), DEMO_ENV) as url:
        yield url
