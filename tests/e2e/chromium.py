"""Which Chromium the browser tests drive, and with which switches (no pytest here: the network-namespace
browser script imports it too).

Debian's headless build of Chromium (package ``chromium-headless-shell``: the same Blink, V8 and network stack
without the browser's window and UI layer) is used where it is installed, as playwright's own downloads use their
headless shell for ``headless=True``: a page load of the dashboard costs about 40 % less CPU in it than in the
full ``chromium`` run with ``--headless`` (``perf/bench_chromium.py``).  Debian's full ``chromium`` is used
where the shell is not installed.  scripts/test installs the shell when it can."""

from __future__ import annotations

from pathlib import Path

HEADLESS_SHELL = Path("/usr/lib/chromium/chromium-headless-shell")
FULL = Path("/usr/bin/chromium")
# what every launch passes: no sandbox (the tests run as root in a container), no GPU process, nothing fetched
# from the internet in the background (updates, safe browsing lists, field trials)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"]


def executable() -> Path:
    """The headless shell where it is installed, else the full Chromium (which may be missing too: the caller
    says so, naming the package to install)."""
    return HEADLESS_SHELL if HEADLESS_SHELL.exists() else FULL


def missing() -> str | None:
    """Why no Chromium can be driven here (None when one can)."""
    if executable().exists():
        return None
    return (f"neither {HEADLESS_SHELL} nor {FULL} is installed: scripts/test installs Debian's chromium "
            "(apt-get install chromium chromium-headless-shell)")
