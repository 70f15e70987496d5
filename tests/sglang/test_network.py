"""Reaching servers: the client ignores proxies; the port check sees listeners, not TIME_WAIT."""

import http.server
import threading

from backend.sglang.client import SglangClient
from backend.sglang.version import capabilities


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


def test_proxy_variables_are_ignored(monkeypatch):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        # a proxy that does not exist: going through it would fail
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        client = SglangClient(f"http://127.0.0.1:{srv.server_address[1]}", capabilities("0.5.23"))
        status, body, error, _ = client._get("/health", 2.0)
        assert (status, error) == (200, None)
        assert body == b"ok"
    finally:
        srv.shutdown()
        srv.server_close()


def test_port_check_ignores_time_wait_but_sees_a_listener():
    import socket

    from backend.sglang.preflight import port_is_free

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    port = srv.server_address[1]
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    # a few closed connections leave sockets in TIME_WAIT on the server's side
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            c.recv(100)
    assert port_is_free("127.0.0.1", port) is False  # still listening
    srv.shutdown()
    srv.server_close()
    assert port_is_free("127.0.0.1", port) is True  # only TIME_WAIT remains
