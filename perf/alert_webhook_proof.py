"""Proof: an alert that fires on its own reaches a Slack-compatible webhook.

    python perf/alert_webhook_proof.py [--shots DIR] [--timeout 240]

Writes the demo workspace into a temporary folder, with one change and an ``[alerts]`` table:

* the 70B demo server's draft accepts nothing (the simulator's ``SPECDECK_SIM_ACCEPT_LEN = "1.0"``): its
  accept_len stays at 1.00, as it did when the EAGLE-3 draft was fed the wrong hidden states;
* ``[alerts] webhook`` points at a local receiver on 127.0.0.1 (a stand-in for Slack's incoming webhook:
  it keeps every JSON body POSTed to it and shows them as a channel would), ``base_url`` at the
  dashboard, the rules evaluated every 2 s, and accept_len judged over the first 10 s after ready.

Then it starts the dashboard on that workspace (which starts the server and the alerts engine), waits for
the receiver to get the "accept-stuck" notification, and prints the body received, the time from the
server's ready to the notification, and ``alerts list --json``.  With Debian's chromium it saves two
screenshots into ``--shots`` (default /tmp/shots): the receiver's channel and the dashboard's Overview
with the alert, each at 1024x768 and 1440x900.  Everything it started is stopped at the end.
"""

from __future__ import annotations

import argparse
import html
import io
import json
import os
import random
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backend.flows.demo import write_demo_workspace  # noqa: E402
from tests.e2e import _dashboard, chromium  # noqa: E402
from tests.helpers import free_port  # noqa: E402


class Receiver(ThreadingHTTPServer):
    """Keeps every POSTed JSON body with its arrival time; GET / shows them as a chat channel."""

    daemon_threads = True

    def __init__(self):
        self.bodies: list[tuple[float, dict]] = []
        self.got = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/specdeck"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            self.send_response(400)
            self.end_headers()
            return
        self.server.bodies.append((time.time(), body))
        self.server.got.set()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"ok")

    def do_GET(self):  # noqa: N802
        rows = []
        for t, body in self.server.bodies:
            text = html.escape(str(body.get("text", ""))).replace("\n", "<br>")
            rows.append(f"<div class='msg'><div class='who'>specdeck-alerts <span class='t'>"
                        f"{time.strftime('%H:%M:%S', time.localtime(t))}</span></div><div>{text}</div>"
                        f"<pre>{html.escape(json.dumps(body, indent=2))}</pre></div>")
        page = ("<html><head><title>#gpu-alerts</title><style>body{font-family:sans-serif;margin:24px;"
                "background:#f8f8f8}.msg{background:#fff;border:1px solid #ddd;border-radius:6px;padding:12px;"
                "margin:10px 0}.who{font-weight:bold}.t{color:#888;font-weight:normal;margin-left:8px}"
                "pre{background:#f2f2f2;padding:8px;font-size:12px;white-space:pre-wrap}</style></head><body>"
                f"<h2>#gpu-alerts <small style='color:#888'>(webhook receiver on {html.escape(self.server.url)},"
                f" {len(self.server.bodies)} message(s))</small></h2>{''.join(rows) or '<p>nothing yet</p>'}"
                "</body></html>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


def workspace(root: Path, webhook: str, base_url: str) -> Path:
    cfg = write_demo_workspace(root)
    text = cfg.read_text()
    if 'SPECDECK_SIM_ACCEPT_P = "0.62"' not in text:
        raise SystemExit(f"{cfg}: the demo server's SPECDECK_SIM_ACCEPT_P line changed; update this script")
    text = text.replace('SPECDECK_SIM_ACCEPT_P = "0.62"', 'SPECDECK_SIM_ACCEPT_LEN = "1.0"')
    text += (f'\n[alerts]\nwebhook = "{webhook}"\nbase_url = "{base_url}"\ninterval_s = 2\n'
             'accept_window_s = 10\n')
    cfg.write_text(text)
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shots", type=Path, default=Path("/tmp/shots"))
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for the notification")
    args = ap.parse_args(argv)

    # the demo's servers take ports from SPECDECK_DEMO_PORT_BASE: away from other demos on this machine
    os.environ.setdefault("SPECDECK_DEMO_PORT_BASE", str(random.randrange(31000, 39000, 100)))
    recv = Receiver()
    threading.Thread(target=recv.serve_forever, daemon=True).start()
    port = free_port()
    _dashboard.free_port = lambda: port  # the dashboard's address goes into base_url before it starts
    base_url = f"http://127.0.0.1:{port}"
    status = 1
    with tempfile.TemporaryDirectory(prefix="specdeck-alert-proof-") as tmp:
        home = Path(tmp)
        ws = home / "demo"
        workspace(ws, recv.url, base_url)
        t0 = time.time()
        with _dashboard.serve(home, _dashboard.DEMO_ENV, workspace=ws, timeout_s=120.0) as url:
            print(f"dashboard {url} up in {time.time() - t0:.1f} s; webhook {recv.url}")
            if not recv.got.wait(args.timeout):
                print(f"no notification within {args.timeout:.0f} s; the dashboard's log ends:\n"
                      + (home / "streamlit.log").read_text(errors="replace")[-3000:], file=sys.stderr)
            else:
                t_recv, body = recv.bodies[0]
                print(f"notification received {t_recv - t0:.1f} s after the dashboard was started:")
                print(json.dumps(body, indent=2))
                status = 0 if "accept_len" in body.get("text", "") else 1
            from backend.cli import main as cli

            out = io.StringIO()
            cli(["--workspace", str(ws), "alerts", "list", "--all", "--json"], out=out, err=out)
            print("alerts list --all --json:")
            print(out.getvalue().strip())
            if chromium.missing() is None:
                args.shots.mkdir(parents=True, exist_ok=True)
                names = []
                for w, h in ((1024, 768), (1440, 900)):
                    with _dashboard.browser(w, h) as page:
                        page.goto(recv.url.rsplit("/hooks", 1)[0] + "/")
                        names.append(args.shots / f"alert-webhook-receiver-{w}.png")
                        page.screenshot(path=str(names[-1]))
                        page.goto(url.page(""))
                        page.wait_for_selector("[data-testid='stApp'][data-test-connection-state='CONNECTED']",
                                               timeout=60_000)
                        page.get_by_text("accept_len", exact=False).first.wait_for(timeout=60_000)
                        time.sleep(2)  # let the Overview's tiles finish drawing before the picture
                        names.append(args.shots / f"alert-webhook-overview-{w}.png")
                        page.screenshot(path=str(names[-1]))
                print("screenshots:", ", ".join(map(str, names)))
    recv.shutdown()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
