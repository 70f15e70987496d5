"""Save screenshots of the dashboard's pages (for the README and release notes).

    .venv/bin/python scripts/screenshots.py --out docs [--workspace DIR] [--wait 12] [--page processes ...]

Starts `streamlit run app.py` on a free 127.0.0.1 port (the demo workspace in a
temporary home unless --workspace is given), opens each page in Debian's
Chromium, waits, saves <out>/<page>.png, then stops the dashboard (and the temporary demo's processes).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TITLES = {"servers": "Servers", "processes": "Processes", "gpus": "GPUs"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs")
    ap.add_argument("--workspace")
    ap.add_argument("--wait", type=float, default=12.0, help="seconds to let the demo run first")
    ap.add_argument("--page", action="append", help="page slug (default: all)")
    ap.add_argument("--height", type=int, default=1300)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="specdeck-shots-"))
    env = dict(os.environ, SPECDECK_HOME=str(home))
    if args.workspace:
        env["SPECDECK_WORKSPACE"] = str(Path(args.workspace).resolve())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                time.sleep(0.5)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                   args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                         "--disable-component-update", "--no-first-run"])
            page = b.new_page(viewport={"width": 1500, "height": args.height})
            page.goto(url)
            page.wait_for_selector("text=Workspace:", timeout=60_000)
            time.sleep(args.wait)
            for slug in args.page or [s for s in TITLES if (REPO / "pages" / f"{s}.py").exists()]:
                page.locator("[data-testid='stSidebarNav'] a").filter(has_text=TITLES[slug]).first.click()
                page.get_by_role("heading", name=TITLES[slug]).first.wait_for(timeout=30_000)
                time.sleep(4)
                page.screenshot(path=str(out / f"{slug}.png"), full_page=True)
                print(out / f"{slug}.png")
            b.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        if not args.workspace:  # end the temporary demo's processes; never touch a real workspace
            subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(home / "demo"),
                            "processes", "stop-all"], cwd=REPO, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
