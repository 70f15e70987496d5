"""The GPUs page in Chromium at 1024 and 1440 px: nothing a user needs is cut.

`streamlit run app.py` on a workspace with the fake 8-GPU source and two
training runs (the fake places each on a GPU, so the process table has
rows); every metric label, value and note, button and caption is checked
for text cut off by its box.  Screenshots go to artifacts/screenshots/.
"""

from __future__ import annotations

import sys

import pytest
from tests.e2e._dashboard import REPO, browser, serve

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
    with serve(root / "home", workspace=ws, timeout_s=90) as url:
        yield url


@pytest.mark.timeout(300)
@pytest.mark.parametrize("width", [1024, 1440])
def test_nothing_on_the_gpus_page_is_cut(dashboard, width):
    from playwright.sync_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    with browser(width, 4200) as page:
        page.goto(dashboard.page("/gpus"), wait_until="domcontentloaded")
        expect(page.get_by_role("heading", name="GPUs").first).to_be_visible(timeout=120_000)
        # the live block has drawn: key figures, both training runs attributed, the history chart
        expect(page.get_by_text("Sampler cost").first).to_be_visible(timeout=120_000)
        expect(page.get_by_text("train-draft-b", exact=False).first).to_be_visible(timeout=120_000)
        expect(page.locator(".sd-chart[data-drawn] canvas").first).to_be_visible(timeout=120_000)
        assert page.locator("[data-testid='stException']").count() == 0
        cut = page.evaluate(CUT_TEXT)
        page.screenshot(path=str(SHOTS / f"gpus-{width}.png"), full_page=True)
        assert cut == [], f"cut at {width} px: {cut}"
