"""The dashboard sends the browser's code in whole pieces (ui.context.serve_static_files_whole): every file
of Streamlit's static folder, served through Streamlit's own static handler, goes out as one piece of body
once it is set, not in 64 KiB pieces that each wait for a script run to let go of Python's lock.  In a fresh
interpreter, since the setting is per process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CODE = r"""
import asyncio, os
from pathlib import Path
import streamlit
from streamlit.web.server.starlette.starlette_static_routes import create_streamlit_static_handler
from ui.context import serve_static_files_whole

static = Path(streamlit.__file__).parent / "static"
biggest = max((p for p in static.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
app = create_streamlit_static_handler(str(static), None)

async def pieces(rel):
    sent, asked = [], []
    async def receive():  # the request, then a client that stays until the response is out
        asked.append(1)
        if len(asked) == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()
    async def send(message):
        sent.append(message)
    scope = {"type": "http", "method": "GET", "path": "/" + rel, "raw_path": ("/" + rel).encode(),
             "root_path": "", "query_string": b"", "headers": [], "scheme": "http", "http_version": "1.1",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1)}
    await app(scope, receive, send)
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert sent[0]["status"] == 200, sent[0]
    assert sum(len(m.get("body", b"")) for m in bodies) == biggest.stat().st_size
    return len([m for m in bodies if m.get("body")])

rel = biggest.relative_to(static).as_posix()
before = asyncio.run(pieces(rel))
first, again = serve_static_files_whole(), serve_static_files_whole()
after = asyncio.run(pieces(rel))
print(biggest.name, biggest.stat().st_size, before, first, again, after)
"""


def test_streamlits_biggest_static_file_goes_out_in_one_piece_once_set():
    r = subprocess.run([sys.executable, "-c", CODE], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    name, size, before, first, again, after = r.stdout.split()
    assert int(size) > 1 << 20, f"{name}: the biggest file of Streamlit's static folder is {size} bytes"
    assert int(before) > 10  # 64 KiB pieces before
    assert (first, again) == ("True", "False")  # set once
    assert after == "1", f"{name} ({size} bytes) went out in {after} pieces"
