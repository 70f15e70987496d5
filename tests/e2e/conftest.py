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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test on the shared dashboard gets the end of that dashboard's log (its own ``serve`` adds it
    for a test that starts its own; the shared one outlives the test, so the failure never passes through it),
    and what its workspace's servers and jobs wrote last."""
    report = yield
    url = item.funcargs.get("demo_dashboard") if hasattr(item, "funcargs") else None
    if report.failed and url is not None and call.when == "call":
        home = getattr(url, "home", None)
        if home is not None:
            parts = []
            for path in [home / "streamlit.log", *sorted((home / "demo" / "logs").glob("*.log"))]:
                try:
                    parts.append(f"--- {path.name} (its end):\n" + path.read_text(errors="replace")[-1500:])
                except OSError:
                    continue
            if parts:
                report.sections.append(("the shared dashboard", "\n".join(parts)))
    return report
