"""Benchmark: how long the Servers page takes to show SGLang's own verdict on an edited launch
command, in a browser, as a user edits ``extra arguments`` in the Start… panel.

    python perf/bench_preflight_edit.py [--python .venv-serve/bin/python] [--port 8611] [--shot FILE]

Starts the dashboard on a temporary workspace with one EAGLE3 server of that serving python
(never launched), opens the Servers page in Chromium at 1024 px, and prints:

* the time until the first preflight is shown (the warm parser's sglang import included);
* for each of three edits of ``extra arguments`` (each a command the parser has not seen),
  the time from Enter until the panel shows what SGLang's parser made of it;
* whether the parser process ended after the dashboard was sent SIGTERM.

Needs Chromium at /usr/bin/chromium and Playwright (``pip install playwright``; no browser
download).
"""

from __future__ import annotations

import argparse
import os
import signal
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backend.sim.models import make_draft_dir, make_target_dir  # noqa: E402
from backend.supervisor.starts import proc_stat  # noqa: E402

EDITS = (("--speculative-num-step 6", "sets speculative_num_steps to 6"),
         ("--tp 2", "sets tp_size to 2"),
         ("--speculative-algo EAGLE", "sets speculative_algorithm to EAGLE"))
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"]


def _workspace(root: Path, python: str) -> None:
    make_target_dir(root / "models" / "target", hidden_size=4096, num_hidden_layers=32, vocab_size=128256)
    make_draft_dir(root / "models" / "draft", target_hidden_size=4096, vocab_size=128256, draft_vocab_size=32000)
    (root / "specdeck.toml").write_text(f"""[workspace]
name = "preflight-edit-bench"

[[server]]
name = "llama-eagle3"
model_path = "{root / 'models' / 'target'}"
python = "{python}"
port = 30111
gpus = [0]
extra_args = ["--speculative-num-step", "5"]

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{root / 'models' / 'draft'}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
""")


def _parsers() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "specdeck-argcheck|prepare_server_args"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _ended(pid: int) -> bool:
    return proc_stat(pid)[0] in (b"Z", b"X")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=str(REPO / ".venv-serve" / "bin" / "python"))
    ap.add_argument("--port", type=int, default=8611)
    ap.add_argument("--shot", help="save a full-page screenshot after the last edit")
    a = ap.parse_args()
    token = secrets.token_urlsafe(24)  # the loopback token the dashboard asks each browser for
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="bench-preflight-edit-"))
    _workspace(root, a.python)
    before = set(_parsers())
    dash = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(a.port),
                             "--server.headless", "true"], cwd=REPO, env={**os.environ, "SPECDECK_WORKSPACE": str(root),
                                                        "SPECDECK_ACCESS_TOKEN": token},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1024, "height": 2400})
            deadline = time.time() + 60
            while True:
                try:
                    page.goto(f"http://127.0.0.1:{a.port}/?token={token}", timeout=5000)
                    break
                except Exception:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.5)
            t0 = time.perf_counter()
            page.get_by_text("checked by SGLang", exact=False).first.wait_for(timeout=120000)
            print(f"first preflight shown {time.perf_counter() - t0:.2f} s after the page loaded "
                  "(the parser's sglang import included)")
            page.get_by_role("button", name="Start…").click()
            box = page.get_by_label("extra arguments")
            box.wait_for(timeout=30000)
            for value, want in EDITS:
                box.fill(value)
                t = time.perf_counter()
                box.press("Enter")
                page.get_by_text(want, exact=False).first.wait_for(timeout=120000)
                print(f"edit extra arguments to {value!r}: SGLang's verdict shown after "
                      f"{time.perf_counter() - t:.2f} s")
            if a.shot:
                page.screenshot(path=a.shot, full_page=True)
            browser.close()
        parsers = [pid for pid in _parsers() if pid not in before]
        print(f"parser processes of this dashboard: {parsers}")
    finally:
        os.killpg(dash.pid, signal.SIGTERM)
        dash.wait(timeout=30)
    deadline = time.time() + 10
    while time.time() < deadline and not all(_ended(pid) for pid in parsers):
        time.sleep(0.1)
    print("after the dashboard's SIGTERM: " + ("every parser ended" if all(_ended(pid) for pid in parsers)
                                                else f"still running: {[p for p in parsers if not _ended(p)]}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
