"""A raw client of Streamlit's websocket protocol (``/_stcore/stream``), no browser.

Run from the network namespace by tests/e2e/test_exposed_netns.py:

    python tests/e2e/netns_ws_client.py HOST PORT OPERATOR PASSWORD VIEWER PASSWORD
    python tests/e2e/netns_ws_client.py HOST PORT --anonymous

It connects to HOST:PORT but sends ``Host: localhost:PORT``, as a client
pretending to be local would.  With users, it walks through:

1. the dashboard unsigned: what the first run draws, a page asked for by name
   (``page_name=processes``), and a wrong password;
2. OPERATOR signs in, opens Processes and Training (learning the ids of their
   Stop button and typed-path fields), and signs out;
3. unsigned again, it sends those widget states anyway: Stop pressed, a
   training log ``/etc/passwd`` to follow;
4. VIEWER signs in: the same forged Stop and typed path;
5. OPERATOR signs in again, presses Stop, prints ``READY`` and waits for a line
   on standard input (the test removes OPERATOR meanwhile), then presses
   "Yes, stop" in the confirmation that is still open.

With ``--anonymous`` (a workspace without users) it reports the first run and
a page asked for by name.  One JSON object per step goes to standard output;
``text`` holds everything the step's runs drew, as protobuf text.
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
        self.page_name = ""
        self.query = ""  # the URL's query string, e.g. "token=..."

    def run(self, widgets: list[dict] = ()) -> dict:
        """One script run (following st.switch_page and st.rerun); the buttons, inputs,
        titles and alerts of the run that finished."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query
        cs.page_script_hash = self.page_hash
        cs.page_name = self.page_name
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
                out["text"].append(str(el))
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
        return {"buttons": {}, "inputs": {}, "alerts": [], "headings": [], "exceptions": [], "text": []}


def _report(step: str, run: dict, **extra) -> None:
    print(json.dumps({"step": step, "buttons": {k: {"disabled": v["disabled"], "help": v["help"]}
                                                for k, v in run["buttons"].items()},
                      "inputs": sorted(run["inputs"]), "alerts": run["alerts"], "headings": run["headings"],
                      "exceptions": run["exceptions"], "text": "\n".join(run["text"]), **extra}), flush=True)


def _sign_in(s: Session, user: str, password: str) -> dict:
    s.page_hash, s.page_name = s.pages["Sign in"], ""
    form = s.run()
    fields = [{"id": form["inputs"]["User name"], "text": user}, {"id": form["inputs"]["Password"], "text": password}]
    return s.run(fields + [{"id": form["buttons"]["Sign in"]["id"]}])


def _open(s: Session, title: str, widgets: list[dict] = ()) -> dict:
    s.page_hash, s.page_name = s.pages[title], ""
    return s.run(widgets)


def main(argv: list[str]) -> int:
    host, port = argv[1], int(argv[2])
    sock = socket.create_connection((host, port), timeout=TIMEOUT_S)
    # the URI names localhost, so the Host header does; the socket goes to HOST
    with connect(f"ws://localhost:{port}/_stcore/stream", sock=sock, subprotocols=["streamlit"],
                 open_timeout=TIMEOUT_S, max_size=None) as ws:
        s = Session(ws)
        _report("anonymous", s.run(), pages=sorted(s.pages))
        s.page_name = "processes"
        _report("anonymous-page-by-name", s.run(), pages=sorted(s.pages))
        if argv[3] == "--anonymous":
            return 0
        operator, op_password, viewer, viewer_password = argv[3:7]
        s.page_name = ""
        _report("wrong-password", _sign_in(s, operator, "not-the-password"))
        _report("operator", _sign_in(s, operator, op_password), pages=sorted(s.pages))
        hashes = dict(s.pages)
        processes = _open(s, "Processes")
        training = _open(s, "Training")
        stop_id = processes["buttons"]["Stop"]["id"]
        follow_id = training["inputs"].get("Training log (its console output)")
        _report("operator-training", training)
        _report("operator-signed-out", s.run([{"id": training["buttons"]["Sign out"]["id"]}]), pages=sorted(s.pages))

        forged = [{"id": stop_id}]
        s.page_hash = hashes["Processes"]
        _report("anonymous-forged-stop", s.run(forged), pages=sorted(s.pages))
        if follow_id:
            s.page_hash = hashes["Training"]
            _report("anonymous-forged-path", s.run([{"id": follow_id, "text": "/etc/passwd"}]))

        _report("viewer", _sign_in(s, viewer, viewer_password), pages=sorted(s.pages))
        _report("viewer-processes", _open(s, "Processes"))
        _report("viewer-forged-stop", _open(s, "Processes", forged))
        if follow_id:
            _report("viewer-forged-path", _open(s, "Training", [{"id": follow_id, "text": "/etc/passwd"}]))
        signed = _open(s, "Processes")
        s.run([{"id": signed["buttons"]["Sign out"]["id"]}])

        _sign_in(s, operator, op_password)
        page = _open(s, "Processes")
        _report("operator-processes", page)
        pressed = s.run([{"id": page["buttons"]["Stop"]["id"]}])
        _report("stop-pressed", pressed)
        print("READY", flush=True)
        sys.stdin.readline()
        _report("confirmed-after-removal", s.run([{"id": pressed["buttons"]["Yes, stop"]["id"]}]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
