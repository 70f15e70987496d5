"""A raw client of Streamlit's websocket protocol (``/_stcore/stream``), no browser.

Run from the network namespace by tests/e2e/test_exposed_netns.py:

    python tests/e2e/netns_ws_client.py HOST PORT USER PASSWORD

It connects to HOST:PORT but sends ``Host: localhost:PORT``, as a client
pretending to be local would, and walks through:

1. the Processes page unsigned: presses Stop although the page drew it
   disabled (a client may send any widget state);
2. the sign-in page: a wrong password, then USER and PASSWORD;
3. the Processes page signed in: presses Stop, prints ``READY`` and waits
   for a line on standard input (the test removes USER meanwhile);
4. presses "Yes, stop" in the confirmation that is still open;
5. opens every page again (the dashboard is read-only now: USER was the only one).

One JSON object per step goes to standard output.
"""

from __future__ import annotations

import json
import socket
import sys

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect

TIMEOUT_S = 90


class Session:
    def __init__(self, ws):
        self.ws = ws
        self.pages: dict[str, str] = {}
        self.page_hash = ""

    def run(self, widgets: list[dict] = ()) -> dict:
        """One script run (following st.switch_page and st.rerun); the buttons, inputs,
        titles and alerts of the run that finished."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = ""
        cs.page_script_hash = self.page_hash
        for spec in widgets:
            w = cs.widget_states.widgets.add()
            w.id = spec["id"]
            if "text" in spec:
                w.string_value = spec["text"]
            else:
                w.trigger_value = True
        self.ws.send(msg.SerializeToString())
        out = self._fresh()
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(self.ws.recv(timeout=TIMEOUT_S))
            kind = fwd.WhichOneof("type")
            if kind == "navigation":
                self.pages = {p.page_name: p.page_script_hash for p in fwd.navigation.app_pages}
            elif kind == "new_session":
                out = self._fresh()  # a new run started (after a page switch or rerun)
            elif kind == "page_info_changed":
                pass
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                t = el.WhichOneof("type")
                if t == "button":
                    out["buttons"][el.button.label] = {"id": el.button.id, "disabled": el.button.disabled,
                                                       "help": el.button.help}
                elif t == "text_input":
                    out["inputs"][el.text_input.label] = el.text_input.id
                elif t == "alert":
                    out["alerts"].append(el.alert.body)
                elif t == "heading":
                    out["headings"].append(el.heading.body)
                elif t == "exception":
                    out["exceptions"].append(el.exception.message)
            elif kind == "script_finished":
                if fwd.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    out = self._fresh()
                    continue
                return out

    @staticmethod
    def _fresh() -> dict:
        return {"buttons": {}, "inputs": {}, "alerts": [], "headings": [], "exceptions": []}


def _report(step: str, run: dict) -> None:
    print(json.dumps({"step": step, "buttons": {k: {"disabled": v["disabled"], "help": v["help"]}
                                                for k, v in run["buttons"].items()},
                      "alerts": run["alerts"], "headings": run["headings"], "exceptions": run["exceptions"]}),
          flush=True)


def main(argv: list[str]) -> int:
    host, port, user, password = argv[1], int(argv[2]), argv[3], argv[4]
    sock = socket.create_connection((host, port), timeout=TIMEOUT_S)
    # the URI names localhost, so the Host header does; the socket goes to HOST
    with connect(f"ws://localhost:{port}/_stcore/stream", sock=sock, subprotocols=["streamlit"],
                 open_timeout=TIMEOUT_S, max_size=None) as ws:
        s = Session(ws)
        s.run()
        s.page_hash = s.pages["Processes"]
        page = s.run()
        _report("unsigned", page)
        _report("unsigned-forged-stop", s.run([{"id": page["buttons"]["Stop"]["id"]}]))

        s.page_hash = s.pages["Sign in"]
        form = s.run()
        fields = [{"id": form["inputs"]["User name"], "text": user}, {"id": form["inputs"]["Password"]}]
        fields[1]["text"] = "not-the-password"
        _report("wrong-password", s.run(fields + [{"id": form["buttons"]["Sign in"]["id"]}]))
        fields[1]["text"] = password
        _report("signed-in", s.run(fields + [{"id": form["buttons"]["Sign in"]["id"]}]))

        s.page_hash = s.pages["Processes"]
        page = s.run()
        _report("signed-in-processes", page)
        pressed = s.run([{"id": page["buttons"]["Stop"]["id"]}])
        _report("stop-pressed", pressed)
        print("READY", flush=True)
        sys.stdin.readline()
        _report("confirmed-after-removal", s.run([{"id": pressed["buttons"]["Yes, stop"]["id"]}]))
        for title in ("Servers", "Processes", "GPUs"):
            s.page_hash = s.pages[title]
            _report(f"read-only {title}", s.run())
        print(json.dumps({"step": "pages", "pages": sorted(s.pages)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
