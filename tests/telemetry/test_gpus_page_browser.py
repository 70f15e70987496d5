"""The GPUs page in Chromium at 1024 and 1440 px: nothing a user needs is cut.

`streamlit run app.py` on a workspace with the fake 8-GPU source and two
training runs (the fake places each on a GPU, so the process table has
rows); every metric label, value and note, button and caption is checked
for text cut off by its box.  Screenshots go to artifacts/screenshots/.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SHOTS = REPO / "artifacts" / "screenshots"

pytestmark = pytest.mark.browser

WORKSPACE = """[workspace]
name = "gpu-widths"

[telemetry]
source = "fake"

[[process]]
name = "train-draft-a"
kind = "training"
argv = [{py}, "-c", "import time; time.sleep(600)"]
autostart = true
stop_grace_s = 5

[[process]]
name = "train-draft-b"
kind = "training"
argv = [{py}, "-c", "import time; time.sleep(600)"]
autostart = true
stop_grace_s = 5
"""

# Elements whose text is cut when their content is wider than their box.
CUT_TEXT = """() => {
  const sels = ['[data-testid="stMetricLabel"]', '[data-testid="stMetricValue"]', '[data-testid="stMetricDelta"]',
                'button', '[data-testid="stCaptionContainer"]', '[data-testid="stHeading"]',
                '[data-testid="stButtonGroup"]', '[data-testid="stTable"]'];
  const out = [];
  for (const sel of sels) {
    for (const el of document.querySelectorAll(sel)) {
      for (const e of [el, ...el.querySelectorAll('*')]) {
        const cs = getComputedStyle(e);
        const clips = cs.overflow.includes('hidden') || cs.overflowX.includes('hidden') || cs.overflowX.includes('auto')
                      || cs.textOverflow === 'ellipsis';
        if (clips && e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1) {
          out.push(sel + ' | ' + (el.innerText || '').trim().slice(0, 80) + ' | ' + e.scrollWidth + '>' + e.clientWidth);
          break;
        }
      }
    }
  }
  return out;
}"""


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-widths")
    ws = root / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(WORKSPACE.format(py='"' + sys.executable + '"'))
    port = free_port()
    env = dict(os.environ, SPECDECK_HOME=str(root / "home"), SPECDECK_WORKSPACE=str(ws), PYTHONUNBUFFERED="1")
    log = open(root / "streamlit.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.headless", "true", "--global.developmentMode", "false"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("streamlit did not become healthy: "
                                   + (root / "streamlit.log").read_text(errors="replace")[-2000:])
            time.sleep(0.5)  # polling the health endpoint, with the deadline above
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(ws), "processes", "stop-all"],
                       cwd=REPO, env=env, timeout=60, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("width", [1024, 1440])
def test_nothing_on_the_gpus_page_is_cut(dashboard, width):
    from playwright.sync_api import expect, sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test installs Debian's chromium (apt-get install chromium)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                           "--disable-component-update", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 4200})
            page.goto(f"{dashboard}/gpus", wait_until="domcontentloaded")
            expect(page.get_by_role("heading", name="GPUs").first).to_be_visible(timeout=60_000)
            # the live block has drawn: key figures, both training runs attributed, the history chart
            expect(page.get_by_text("Sampler cost").first).to_be_visible(timeout=60_000)
            expect(page.get_by_text("train-draft-b", exact=False).first).to_be_visible(timeout=60_000)
            expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=60_000)
            assert page.locator("[data-testid='stException']").count() == 0
            cut = page.evaluate(CUT_TEXT)
            page.screenshot(path=str(SHOTS / f"gpus-{width}.png"), full_page=True)
            assert cut == [], f"cut at {width} px: {cut}"
        finally:
            browser.close()
