"""At 1024 px the Training page's overlay-by-path field and its Overlay button share one row, and the field's
label takes one line (in a column of 3/8 of the row the button fell under the field)."""

from __future__ import annotations

import pytest

from tests.e2e._dashboard import browser, serve, settle
from tests.train.page_kit import run_workspace

pytestmark = pytest.mark.browser


BOXES_JS = """() => {
  const button = [...document.querySelectorAll("[data-testid='stMain'] button")]
    .find(b => b.innerText.trim().endsWith('Overlay'));
  const field = document.querySelector("input[aria-label^='Overlay a log']");
  if (!button || !field) return null;
  const label = [...document.querySelectorAll("[data-testid='stWidgetLabel']")]
    .find(l => l.innerText.trim().startsWith('Overlay a log'));
  const p = label.querySelector('p') || label;
  const box = (e) => {
    const r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right};
  };
  return {button: box(button), field: box(field), label: p.getBoundingClientRect().height,
          line: parseFloat(getComputedStyle(p).lineHeight)};
}"""


@pytest.mark.timeout(300)
def test_the_overlay_button_stays_beside_its_field_at_1024(tmp_path):
    log = ("Auto-calculated total_steps: 4 (num_epochs=1 * steps_per_epoch=4)\n"
           "Training Epoch 0:  50%|#####     | 2/4 [00:02<00:02,  1.00s/it, loss=2.00, acc=0.40]\n")
    ws = run_workspace(tmp_path / "ws", log, name="width")
    with serve(tmp_path / "home", workspace=ws) as url, browser(1024, 768) as page:
        page.goto(url + "/training?token=" + url.token + "&run=run")
        page.wait_for_selector("input[aria-label^='Overlay a log']", timeout=120_000)
        settle(page)
        # measured in the page's own font: until Source Sans has loaded (late on a busy machine) the label
        # is set in a wider fallback, on two lines
        page.wait_for_function("() => document.fonts.status === 'loaded' && "
                               "document.fonts.check('16px \"Source Sans\"')", timeout=60_000)
        boxes = page.evaluate(BOXES_JS)
        page.screenshot(path=str(tmp_path / "training-1024.png"))
    assert boxes is not None, "no Overlay button or field on the Training page"
    b, f = boxes["button"], boxes["field"]
    assert b["left"] >= f["right"] and b["top"] < f["bottom"] and b["bottom"] > f["top"], boxes  # one row
    assert boxes["label"] < 1.5 * boxes["line"], boxes  # the label on one line
