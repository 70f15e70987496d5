"""Every page of the navigation has its own URL path, named in app.py (st.Page url_path), and the frame
draws the page names and a line before it opens the workspace."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "app.py"


def _pages_table() -> list[tuple]:
    tree = ast.parse(APP.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PAGES" for t in node.targets):
            return [tuple(ast.literal_eval(e) for e in row.elts) for row in node.value.elts]
    raise AssertionError("app.py has no PAGES table")


def test_every_page_has_its_own_url_path():
    rows = _pages_table()
    paths = [r[3] for r in rows]
    assert "servers" in paths
    assert len(set(paths)) == len(paths)
    for file, title, _icon, path in rows:
        assert (REPO / file).exists(), file
        assert path and path == path.lower() and "/" not in path, path
        assert title.lower() == path or (title, path) == ("GPUs", "gpus"), (title, path)


def test_every_st_page_of_the_frame_names_its_url_path():
    tree = ast.parse(APP.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "Page"]
    assert calls, "app.py makes no st.Page"
    for call in calls:
        assert "url_path" in {k.arg for k in call.keywords}, ast.unparse(call)


def test_the_frame_names_the_pages_before_the_workspace_opens():
    """st.navigation with the page titles runs before runtime(), the slow first opening of a workspace."""
    tree = ast.parse(APP.read_text())
    order = []
    for node in tree.body:
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                name = getattr(n.func, "attr", None) or getattr(n.func, "id", None)
                if name in ("runtime", "_early_frame"):
                    order.append(name)
    assert order and order[0] == "_early_frame", order
    early = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_early_frame")
    src = ast.unparse(early)
    assert "st.navigation(" in src and "Opening the workspace" in src


def test_the_pages_are_not_in_a_folder_named_pages():
    """Streamlit runs a file of a ``pages/`` folder beside the main script on its own, without the frame, when
    its URL is the first a fresh server is asked for (its older multipage mechanism): no sidebar, no sign-in
    gate, and two script runs more before the page once sent through the frame.  The pages live elsewhere."""
    assert not (REPO / "pages").exists()
    assert all(r[0].startswith("app_pages/") for r in _pages_table())
