"""Benchmark: does the dashboard stay responsive with 200 browser sessions open from one address?

    python perf/bench_sessions.py [--sessions 200] [--samples 40]

Starts the dashboard on 127.0.0.1 with the demo workspace and its loopback token, then, for
each case, opens the sessions (raw websocket clients of Streamlit's protocol, each completing
its first script run), keeps them open, and measures while they are open:

* ``/_stcore/health``: the latency of the server's own health route (``--samples`` calls,
  0.1 s apart): median, 95th percentile and maximum;
* a session with the token opened before the others: how long a run of its page (Servers)
  takes while they are open.

Cases: no other session; N sessions without the token (another local user, a forwarder: the
token page only); N sessions with the token (the first ``sessions_per_address`` get the
dashboard, the rest are refused before anything is drawn).  The figures are printed side by
side from one run, so the ratios can be compared.
"""

from __future__ import annotations

import argparse
import secrets
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.e2e._dashboard import serve  # noqa: E402  (the dashboard the tests start)
from tests.e2e.netns_ws_client import Session  # noqa: E402  (the raw websocket client)


def _open(port: int, query: str):
    from websockets.sync.client import connect

    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    ws = connect(f"ws://127.0.0.1:{port}/_stcore/stream", sock=sock, subprotocols=["streamlit"],
                 open_timeout=120, max_size=None)
    s = Session(ws)
    s.query = query
    return ws, s.run()


def _health(port: int, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=60) as r:
            r.read()
        out.append(time.perf_counter() - t0)
        time.sleep(0.1)
    return out


def _case(name: str, port: int, token: str, n: int, query: str, samples: int) -> dict:
    from websockets.sync.client import connect

    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    mine = connect(f"ws://127.0.0.1:{port}/_stcore/stream", sock=sock, subprotocols=["streamlit"],
                   open_timeout=120, max_size=None)
    me = Session(mine)
    me.query = f"token={token}"
    me.run()  # the user's own tab, open before the crowd arrives
    opened = []
    t0 = time.perf_counter()
    refused = 0
    try:
        for _ in range(n):
            ws, run = _open(port, query)
            opened.append(ws)
            refused += any("Too many open dashboard sessions" in a for a in run["alerts"])
        open_s = time.perf_counter() - t0
        time.sleep(3)  # let timed refreshes of the admitted sessions settle into their cadence
        lat = _health(port, samples)
        runs = []
        for _ in range(5):
            t1 = time.perf_counter()
            run = me.run()
            runs.append(time.perf_counter() - t1)
        page_s = statistics.median(runs)
    finally:
        for ws in opened:
            ws.close()
        mine.close()
    lat.sort()
    return {"case": name, "sessions": n, "refused": refused, "open_s": open_s,
            "health_median_ms": 1000 * statistics.median(lat), "health_p95_ms": 1000 * lat[int(0.95 * (len(lat) - 1))],
            "health_max_ms": 1000 * lat[-1], "page_run_s": page_s,
            "page_refused": any("Too many" in a for a in run["alerts"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--samples", type=int, default=40)
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-sessions-"))
    token = secrets.token_urlsafe(24)
    with serve(home, timeout_s=90, token=token) as url:
        port = int(url.rsplit(":", 1)[1])
        ws, _ = _open(port, f"token={token}")  # start the backend (and the demo) before measuring
        ws.close()
        time.sleep(5)
        rows = [_case("none open", port, token, 0, "", a.samples),
                _case("without token", port, token, a.sessions, "", a.samples),
                _case("with token", port, token, a.sessions, f"token={token}", a.samples)]
    print(f"{'case':<15} {'open':>5} {'refused':>8} {'opening':>8} {'health med':>11} {'p95':>8} {'max':>8} "
          f"{'page run':>9}")
    for r in rows:
        print(f"{r['case']:<15} {r['sessions']:>5} {r['refused']:>8} {r['open_s']:>7.1f}s {r['health_median_ms']:>9.1f}ms "
              f"{r['health_p95_ms']:>6.1f}ms {r['health_max_ms']:>6.1f}ms {r['page_run_s']:>8.2f}s"
              + (" (refused)" if r["page_refused"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
