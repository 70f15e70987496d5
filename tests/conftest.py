"""Shared fixtures: an isolated home so nothing touches ~/.specdeck."""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


# A pytest-xdist worker (scripts/test runs several): its own hundred ports for the demo workspaces
# its tests write (backend/flows/demo.py), so that two workers never give their demos the same port.  The
# workers' hundreds lie in a block of a thousand ports the run holds (_claim_port_block), so that another
# suite running on the machine at the same time takes another block.
_PORT_BLOCK_ENV = "SPECDECK_TEST_PORT_BLOCK"
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    _block = int(os.environ.get(_PORT_BLOCK_ENV) or 30200)
    os.environ["SPECDECK_DEMO_PORT_BASE"] = str(_block + 100 * int(_WORKER[2:]))


# Beside other workers (scripts/test with arguments) the browser tests run in two groups, two Chromiums and
# dashboards at most at a time: the tests on the shared demo dashboard (tests/e2e/conftest.py) and these
# modules in the first, every other browser module in the second.
_FIRST_BROWSER_GROUP = ("tests/e2e/test_browser_smoke.py", "tests/e2e/test_page_paths.py")


def _shares_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return bool(info) and any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


def _on_the_demo_dashboard(item) -> bool:
    return "demo_dashboard" in getattr(item, "fixturenames", ())


def _group(item, workers: int, browser_phase: bool) -> str:
    module = item.nodeid.split("::", 1)[0]
    if item.get_closest_marker("browser"):
        if browser_phase or workers <= 2:  # scripts/test's browser phase: a group per module, the demo
            return "browser-demo" if _on_the_demo_dashboard(item) else module  # dashboard's tests one
        return "browser-1" if _on_the_demo_dashboard(item) or module in _FIRST_BROWSER_GROUP else "browser-2"
    if item.get_closest_marker("slow") and not _shares_a_module_fixture(item):
        return item.nodeid  # a long test on its own, so that a module's long tests run side by side
    return module


BROWSER_MARK = "pytest.mark.browser"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """In an xdist worker (scripts/test: ``--dist loadgroup``): each module is one group, run by one
    worker, except that a ``slow`` test whose module has no module-scoped fixture is a group of its
    own.  In a run of more than two workers beside other tests the ``browser`` tests are in two groups
    (at most two Chromiums and dashboards at a time, never one per worker at once); in scripts/test's
    browser phase (SPECDECK_BROWSER_PHASE=1, or any run of two workers) each browser module is a group, but the
    tests on the shared demo dashboard are one, so that one dashboard serves them.  The browser groups come first (the demo dashboard's first of
    all), then the slow tests, so that the long ones start early and the short ones fill in around them;
    among the rest a module of many tests (one group, on one worker) before a module of few.

    scripts/test collects its browser phase from the files that say ``pytest.mark.browser``: a
    browser test whose file does not say it (marked some other way) is an error here, not a test
    that neither phase runs."""
    unseen = sorted({str(item.path) for item in items if item.get_closest_marker("browser")
                     and BROWSER_MARK not in item.path.read_text(encoding="utf-8")})
    if unseen:
        raise pytest.UsageError(f"browser tests in a file that does not say {BROWSER_MARK} (scripts/test looks "
                                f"for it to find the browser tests): {', '.join(unseen)}")
    if not hasattr(config, "workerinput"):
        return
    workers = int(config.workerinput.get("workercount", 0))
    browser_phase = os.environ.get("SPECDECK_BROWSER_PHASE") == "1"  # set by scripts/test for that phase
    for item in items:
        if not any(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(_group(item, workers, browser_phase)))
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    size = collections.Counter(item.path for item in items)
    # a module's tests in one group keep their order (they may build on each other's work on a module
    # fixture); a slow test that is a group of its own goes before them (the sort is stable)
    items.sort(key=lambda item: (not item.get_closest_marker("browser"), not _on_the_demo_dashboard(item),
                                 not (item.get_closest_marker("slow") and not _shares_a_module_fixture(item)),
                                 item.path not in slow, -size[item.path]))
    _write_groups(config, items)


# pytest-xdist 3.8 puts a test in its ``xdist_group`` by appending ``@group`` to ``item._nodeid``, which
# pytest 9 no longer reads (a node's id is ``item._id``): under ``--dist loadgroup`` every test was a unit
# of its own, so a module's tests ran on several workers and each of them set up the module's fixtures
# (a Ray head, a trained checkpoint, a simulator) again.  The groups go to the controller instead: each
# worker writes ``{nodeid: group}`` into a folder the controller made before starting them (the env var
# below), and the controller's scheduler (``pytest_xdist_make_scheduler``) reads it, once every worker has
# sent its collection, to cut the work into its units.
_GROUPS_ENV = "SPECDECK_XDIST_GROUPS"


def _hear_sigint() -> None:
    """A suite started in the background of a non-interactive shell (``scripts/test &``, a CI runner's step)
    inherits SIGINT ignored, and an ignored signal stays ignored through exec: the command lines the tests
    start and stop with Ctrl-C (``supervise``, ``processes log --follow``) would never hear it.  Every test
    process takes SIGINT back, so what it starts gets the default, as from a terminal."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _share_script_cache() -> None:
    """AppTest compiles app.py and the page at every run (a new ScriptCache each run, and Streamlit's magic
    rewrites each script's syntax tree before compiling it): 100-150 ms of CPU per run of a large page, where the
    dashboard compiles each script once for all its sessions.  The tests share one cache, as the server's
    sessions do; a script is compiled again when its file changed (a test that writes its own app)."""
    try:
        import streamlit.testing.v1.app_test as app_test
        import streamlit.testing.v1.local_script_runner as local_script_runner
        from streamlit.runtime.scriptrunner.script_cache import ScriptCache
    except ImportError:  # a run without Streamlit (the serving environment's tests)
        return

    class SharedScriptCache(ScriptCache):
        def get_bytecode(self, script_path: str):
            st_ = os.stat(script_path)
            key = (os.path.abspath(script_path), st_.st_mtime_ns, st_.st_size)
            with self._lock:
                hit = self._cache.get(key)
            if hit is not None:
                return hit
            code = ScriptCache().get_bytecode(script_path)  # compiled as Streamlit compiles it
            with self._lock:
                self._cache[key] = code
            return code

    shared = SharedScriptCache()
    app_test.ScriptCache = local_script_runner.ScriptCache = lambda: shared


# blocks below the kernel's ephemeral ports (32768 up), which outgoing connections take, and above Ray's
# worker ports (10002-19999); the first is the one every run used before there were blocks
PORT_BLOCKS = (30200, 31200, *range(20200, 30200, 1000))
_held: list = []


def _claim_port_block() -> None:
    """In the process that starts the workers (or runs the tests itself): the first block of PORT_BLOCKS
    whose first port this process can bind, held bound for the whole run, so that a suite started at the
    same time on the machine (another checkout, another user's run) finds it taken and holds the next.  The
    workers read it from the environment they inherit; the workers of a run alone on the machine have the
    hundreds they had before there were blocks.  No block free (twelve suites at once): the first."""
    import socket

    for block in PORT_BLOCKS:
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", block))
        except OSError:
            sock.close()
            continue
        _held.append(sock)
        os.environ[_PORT_BLOCK_ENV] = str(block)
        break
    else:
        os.environ[_PORT_BLOCK_ENV] = str(PORT_BLOCKS[0])


def pytest_configure(config):
    _hear_sigint()  # in the controller and in every worker
    if not hasattr(config, "workerinput"):
        _claim_port_block()
        if not getattr(config.option, "numprocesses", None):
            # the tests run in this process: its demos take the block's first hundred
            os.environ["SPECDECK_DEMO_PORT_BASE"] = str(int(os.environ[_PORT_BLOCK_ENV]) + 1)
    # where tests run; SPECDECK_TEST_SCRIPT_CACHE=0: each AppTest run compiles its scripts again, as AppTest does
    if (hasattr(config, "workerinput") or getattr(config.option, "dist", "no") == "no") and os.environ.get(
            "SPECDECK_TEST_SCRIPT_CACHE") != "0":
        _share_script_cache()
    if hasattr(config, "workerinput") or getattr(config.option, "dist", "no") != "loadgroup":
        return
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="specdeck-xdist-groups-")
    os.environ[_GROUPS_ENV] = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def _write_groups(config, items) -> None:
    folder = os.environ.get(_GROUPS_ENV)
    if not folder or not config.getvalue("loadgroup"):
        return
    import json

    groups = {item.nodeid: "_".join(sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                                              for m in item.iter_markers("xdist_group")})) for item in items}
    path = Path(folder) / f"{config.workerinput['workerid']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, path)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups the workers wrote (above), in the order the workers sorted
    the tests (the browser tests, then the slow ones, first), not xdist's largest-group-first."""
    folder = os.environ.get(_GROUPS_ENV)
    if config.getvalue("dist") != "loadgroup" or not folder:
        return None
    import json

    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                groups: dict[str, str] = {}
                for path in sorted(Path(folder).glob("*.json")):
                    groups.update(json.loads(path.read_text()))
                self._groups = groups
            return self._groups.get(nodeid) or nodeid

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With SPECDECK_TEST_CPU_LOG=FILE: each test's CPU seconds (this process's and those of the child
    processes it reaped while the test ran: CLIs, simulators, supervisor wrappers), appended to FILE as
    ``cpu_s<TAB>wall_s<TAB>nodeid<TAB>start<TAB>worker`` lines (``start`` in seconds since the epoch, to draw
    how busy the workers were over the run).  On a machine with few cores the suite's time is its CPU
    time: this shows which tests use it (``sort -rn FILE | head``)."""
    path = os.environ.get("SPECDECK_TEST_CPU_LOG")
    if not path:
        yield
        return
    import resource
    import time

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    c0, t0, start = cpu(), time.monotonic(), time.time()
    yield
    with open(path, "a") as f:
        f.write(f"{cpu() - c0:.2f}\t{time.monotonic() - t0:.2f}\t{item.nodeid}\t{start:.2f}\t{_WORKER or '-'}\n")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("specdeck-home")
    monkeypatch.setenv("SPECDECK_HOME", str(home))
    monkeypatch.delenv("SPECDECK_WORKSPACE", raising=False)
    yield home


SERVE_PYTHON = REPO / ".venv-serve" / "bin" / "python"


@pytest.fixture(scope="session")
def serve_python() -> Path:
    """Python of the serving environment built from requirements-serve.txt (SGLang's own argument
    parser and benchmark client, on CPU). `scripts/test` builds it; SPECDECK_SERVE_PYTHON overrides.
    Missing: a failure under CI (which must cover this path), a skip elsewhere."""
    path = Path(os.environ.get("SPECDECK_SERVE_PYTHON") or SERVE_PYTHON)
    if not path.exists():
        msg = f"serving environment missing: {path} (scripts/test builds it from requirements-serve.txt)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path
