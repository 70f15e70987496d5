"""The sample viewer follows the newest row while the job writes, stays on a row once one is chosen,
and names the row by its id (not a byte offset)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.regen.regen_fixtures import append, out_row
from tests.regen.test_regen_page import REPO, _page, workspace, write_run  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(120)


def _answers(at: AppTest) -> list[str]:
    return [t.value for t in at.markdown if t.value.startswith("regenerated answer")]


def test_viewer_follows_the_newest_row_and_stays_when_asked(workspace):
    out = write_run(workspace)
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    assert _answers(at) == ["regenerated answer 2"]
    assert any("row id `s2`" in c.value for c in at.caption)
    assert not any("byte" in c.value for c in at.caption)
    append(out, out_row("s3", "regenerated answer 3", dataset="stack-v2"))
    at.run()  # the job wrote a row: the viewer shows it
    assert _answers(at) == ["regenerated answer 3"]
    at.button(key="regen-sample-prev").click().run()  # a row chosen: follow turns off
    assert _answers(at) == ["regenerated answer 2"]
    assert at.toggle(key="regen-sample-follow").value is False
    append(out, out_row("s4", "regenerated answer 4", dataset="stack-v2"))
    at.run()
    assert _answers(at) == ["regenerated answer 2"]  # stays on the row chosen
    assert any("staying on this row" in c.value for c in at.caption)
    at.toggle(key="regen-sample-follow").set_value(True).run()
    assert _answers(at) == ["regenerated answer 4"]
