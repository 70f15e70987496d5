"""Save screenshots of the dashboard's pages (for the README and release notes).

    .venv/bin/python scripts/screenshots.py --out docs/screenshots [--width 1024] [--workspace DIR]
        [--wait 12] [--page processes ...] [--relaunch]

Starts the dashboard as scripts/dashboard does (`python -m ui.launch`, through the browser
tests' tests/e2e/_dashboard.serve) on a free 127.0.0.1 port with a fresh loopback token (the
demo workspace in a temporary home unless --workspace is given), opens each page at its own path in Debian's
Chromium at --width px, waits, saves <out>/<page>-<width>.png.  With --relaunch
it also walks Servers › Relaunch… with an edit (num steps and draft tokens of
the first server) and saves the form, the restart and the server ready again as
<out>/relaunch-edit-{1-form,2-restarting,3-ready}-<width>.png.  Then it stops
the dashboard (and the temporary demo's processes).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.e2e._dashboard import browser, serve  # noqa: E402  (the dashboard and Chromium the browser tests use)

TITLES = {"overview": "Overview", "servers": "Servers", "regeneration": "Regeneration", "training": "Training",
          "benchmarks": "Benchmarks", "processes": "Processes", "gpus": "GPUs"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs")
    ap.add_argument("--workspace")
    ap.add_argument("--wait", type=float, default=12.0, help="seconds to let the demo run first")
    ap.add_argument("--page", action="append", help="page slug (default: all)")
    ap.add_argument("--height", type=int, default=1300)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--relaunch", action="store_true", help="also shoot the relaunch-with-edit flow")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="specdeck-shots-"))
    workspace = Path(args.workspace).resolve() if args.workspace else None
    # the dashboard the browser tests start; a real workspace's processes are left running at the end
    with serve(home, workspace=workspace, timeout_s=120, end_processes=workspace is None) as url, \
            browser(args.width, args.height) as page:
        page.goto(url.page())
        page.wait_for_selector("text=Workspace:", timeout=60_000)
        time.sleep(args.wait)
        for slug in args.page or [s for s in TITLES if (REPO / "app_pages" / f"{s}.py").exists()]:
            page.goto(url.page("" if slug == "overview" else f"/{slug}"))
            page.get_by_role("heading", name=TITLES[slug]).first.wait_for(timeout=60_000)
            time.sleep(4)
            shot = out / f"{slug}-{args.width}.png"
            page.screenshot(path=str(shot), full_page=True)
            print(shot)
        if args.relaunch:
            _relaunch_flow(page, out, args.width)
    return 0


def _relaunch_flow(page, out: Path, width: int) -> None:
    """Servers › Relaunch…: raise num steps and draft tokens by one, relaunch, watch it come back."""
    page.locator("[data-testid='stSidebarNav'] a").filter(has_text="Servers").first.click()
    page.get_by_role("heading", name="Servers").first.wait_for(timeout=30_000)
    page.get_by_role("button", name="Relaunch…").first.click(timeout=60_000)
    for label in ("num steps (0 = auto)", "draft tokens (0 = auto)"):
        box = page.get_by_label(label)
        box.fill(str(int(box.input_value()) + 1))
        box.press("Enter")
        time.sleep(2)
    go = page.get_by_role("button", name="Stop and relaunch")
    go.scroll_into_view_if_needed()
    time.sleep(1)
    shots = [out / f"relaunch-edit-1-form-{width}.png"]
    page.screenshot(path=str(shots[0]), full_page=True)
    go.click()
    page.get_by_text("Starting").first.wait_for(timeout=60_000)
    page.evaluate("for (const el of document.querySelectorAll(\"[data-testid='stMain'], [data-testid='stAppViewContainer']\")) el.scrollTo(0, 0)")
    shots.append(out / f"relaunch-edit-2-restarting-{width}.png")
    page.screenshot(path=str(shots[1]), full_page=True)
    page.locator("[data-testid='stMain'] [data-testid='stMarkdownContainer']").filter(
        has_text=re.compile("● RUNNING")).first.wait_for(timeout=120_000)  # the server's badge
    time.sleep(6)
    shots.append(out / f"relaunch-edit-3-ready-{width}.png")
    page.screenshot(path=str(shots[2]), full_page=True)
    for shot in shots:
        print(shot)


if __name__ == "__main__":
    sys.exit(main())
