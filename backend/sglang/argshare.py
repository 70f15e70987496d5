"""The dashboard's warm parsers, lent to the command line of the same user.

The dashboard keeps a warm SGLang parser per serving python (:mod:`backend.sglang.argworker`),
so its checks after the first take tens of milliseconds.  ``specdeck servers preflight`` is a
process of its own: without help it starts a parser and waits for sglang's import (seconds of
CPU) on every call.  Here the dashboard listens on a unix socket in the workspace's ``run/``
folder, and the command line asks it first:

* the socket is ``run/argparser.sock``, mode 0600, in a folder of mode 0700 that this user owns;
  the server takes a connection only from a process of its own user (``SO_PEERCRED``), and the
  client connects only to a socket its user owns with no group or other access, served by a
  process of its user;
* a request is answered only by a parser that runs already (the server never starts one for a
  client) and only when the variables that sglang may read at import (:data:`IMPORT_PREFIXES`)
  are the same in the client's environment as in the one the parser imported in; the parse
  itself runs in a fork with the client's whole environment, as for the dashboard's own checks;
* one JSON line each way per connection; a request is at most :data:`MAX_REQUEST` bytes;
* anything else (no dashboard, another user's socket, a parser for another python, another
  environment, a parser that ended) gives None with the reason in :func:`last_reason`, and the
  caller starts its own parser.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import stat
import struct
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from backend.filemodes import PRIVATE_FILE, make_private_dirs, tighten_dir
from backend.sglang import argworker

SOCKET_NAME = "argparser.sock"
MAX_REQUEST = 1 << 20
MAX_CLIENTS = 8  # connections answered at once; more are closed unanswered
_READ_S = 5.0  # a client has this long to send its request
_CONNECT_S = 2.0
# Variables sglang (or what it imports: torch, triton, transformers, flashinfer) may read at
# import: a parser that imported with other values of these does not answer for this client.
IMPORT_PREFIXES = ("SGLANG", "SGL_", "CUDA", "NVIDIA", "TORCH", "PYTORCH", "TRITON", "FLASHINFER", "NCCL",
                   "HF_", "HUGGINGFACE", "TRANSFORMERS", "TOKENIZERS", "PYTHON", "LD_", "OMP_", "MKL")
_UCRED = struct.Struct("3i")  # pid, uid, gid


def socket_path(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / SOCKET_NAME


def import_differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """Names of the variables in :data:`IMPORT_PREFIXES` whose values differ (or that only one
    has), per-request ones aside (each fork sets those)."""
    names = {k for k in (*a, *b) if k.startswith(IMPORT_PREFIXES) and k not in argworker.PER_REQUEST}
    return sorted(k for k in names if a.get(k) != b.get(k))


@contextmanager
def _address(path: Path) -> Iterator[str]:
    """An address for ``path`` that fits a unix socket's 107 bytes: the path itself, or the same
    file reached through an open descriptor of its folder (``/proc/self/fd/N/name``)."""
    if len(os.fsencode(str(path))) < 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def _peer_uid(sock: socket.socket) -> int:
    _, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return uid


def _read_line(sock: socket.socket, limit: int) -> bytes | None:
    buf = b""
    while b"\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > limit:
            return None
    return buf.split(b"\n", 1)[0]


def _private_socket(path: Path) -> str | None:
    """Why the file at ``path`` is not a socket to trust, or None when it is one: a socket this
    user owns, no group or other access, in a folder this user owns with none either."""
    try:
        st, dst = os.lstat(path), os.stat(path.parent)
    except FileNotFoundError:
        return "no dashboard parser is running for this workspace"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    me = os.geteuid()
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket"
    if st.st_uid != me or dst.st_uid != me:
        return f"{path} belongs to another user"
    if stat.S_IMODE(st.st_mode) & 0o077 or stat.S_IMODE(dst.st_mode) & 0o077:
        return f"{path} or its folder is open to other users"
    return None


# -- the dashboard's side -------------------------------------------------------------------

class ShareServer:
    """Answers the command line's requests from the warm parsers of this process."""

    def __init__(self, run_dir: Path, sock: socket.socket) -> None:
        self.path = socket_path(run_dir)
        self._sock = sock
        self._ino = os.lstat(self.path).st_ino
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self._closed = threading.Event()
        self.answered = 0  # requests a parser answered
        self.declined = 0  # requests refused (no parser, other environment, another user)
        self._thread = threading.Thread(target=self._accept, name="argshare-accept", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._serve_one, args=(conn,), name="argshare-client", daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            with conn:
                if _peer_uid(conn) != os.geteuid():
                    self.declined += 1
                    return
                conn.settimeout(_READ_S)
                line = _read_line(conn, MAX_REQUEST)
                if line is None:
                    return
                conn.settimeout(None)
                answer = self._answer(line)
                conn.sendall((json.dumps(answer) + "\n").encode())
        except (OSError, ValueError):
            pass  # the client went away or sent nothing usable
        finally:
            self._slots.release()

    def _answer(self, line: bytes) -> dict:
        try:
            req = json.loads(line)
            python, additions, request = str(req["python"]), dict(req["additions"]), dict(req["request"])
            env, timeout_s = dict(request["env"]), min(float(req["timeout_s"]), 300.0)
            only_ask_if_any = bool(req.get("has"))
        except (ValueError, KeyError, TypeError):
            self.declined += 1
            return {"shared": False, "why": "the request is not one this dashboard reads"}
        p = argworker.existing(python, additions)
        if p is None:
            self.declined += 1
            return {"shared": False, "why": f"the dashboard has no warm parser for {python} and this server's "
                                            "environment"}
        differ = import_differences(p.env, env)
        if differ:
            self.declined += 1
            return {"shared": False, "why": "the dashboard's parser imported sglang with other values of "
                                            + ", ".join(differ)}
        if only_ask_if_any:
            return {"shared": True}
        answer = argworker.ask_existing(python, additions, request, timeout_s)
        if answer is None:
            self.declined += 1
            return {"shared": False, "why": "the dashboard's parser ended before answering"}
        self.answered += 1
        return {"shared": True, "answer": answer}

    def close(self) -> None:
        """Stop listening and remove the socket (when it is still this server's)."""
        self._closed.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            if os.lstat(self.path).st_ino == self._ino:
                os.unlink(self.path)
        except OSError:
            pass
        self._thread.join(timeout=2.0)


_servers: dict[Path, ShareServer] = {}
_servers_lock = threading.Lock()


def _live(path: Path) -> bool:
    """Whether something answers on the socket at ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(_CONNECT_S)
    try:
        with _address(path) as addr:
            s.connect(addr)
        return True
    except OSError:
        return False
    finally:
        s.close()


def serve(run_dir: str | os.PathLike[str]) -> ShareServer | None:
    """Lend this process's warm parsers to the command line through ``run_dir``'s socket; the
    server already lending them for ``run_dir`` when there is one.  None when another live
    process serves that socket, or it cannot be made (the command line then starts its own)."""
    d = Path(run_dir).resolve()
    with _servers_lock:
        if d in _servers:
            return _servers[d]
        make_private_dirs(d)
        tighten_dir(d)
        path = socket_path(d)
        if os.path.lexists(path):
            if _private_socket(path) is None and _live(path):
                return None  # another dashboard of this workspace lends its parsers
            try:
                st = os.lstat(path)
                if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
                    return None  # not ours to remove
                os.unlink(path)  # left by a dashboard that ended without removing it
            except OSError:
                return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _address(path) as addr:
                sock.bind(addr)
            # before listen(): until then no connection can be made, whatever the umask gave
            os.chmod(path, PRIVATE_FILE)
            sock.listen(MAX_CLIENTS)
        except OSError:
            sock.close()
            return None
        server = _servers[d] = ShareServer(d, sock)
    return server


def stop(run_dir: str | os.PathLike[str]) -> None:
    """Stop lending for ``run_dir`` (its runtime is closing); nothing when this process does not."""
    with _servers_lock:
        server = _servers.pop(Path(run_dir).resolve(), None)
    if server is not None:
        server.close()


def stop_all() -> None:
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for s in servers:
        s.close()


atexit.register(stop_all)


# -- the command line's side -----------------------------------------------------------------

_last_reason = threading.local()


def last_reason() -> str:
    """Why this thread's last :func:`ask` gave None ("" after an answer)."""
    return getattr(_last_reason, "text", "")


def _decline(why: str) -> None:
    _last_reason.text = why


def _call(run_dir: str | os.PathLike[str], body: dict, timeout_s: float) -> dict | None:
    """The dashboard's reply to ``body`` when it is ``{"shared": true, ...}``; else None, with
    the reason in :func:`last_reason`."""
    path = socket_path(Path(run_dir))
    why = _private_socket(path)
    if why is not None:
        _decline(why)
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(_CONNECT_S)
        with _address(path) as addr:
            s.connect(addr)
        if _peer_uid(s) != os.geteuid():
            _decline(f"{path} is served by another user's process")
            return None
        s.sendall((json.dumps(body) + "\n").encode())
        s.settimeout(timeout_s + _READ_S)
        line = _read_line(s, 64 * MAX_REQUEST)
    except ConnectionRefusedError:
        _decline("no dashboard parser is running for this workspace (its socket was left behind)")
        return None
    except OSError as exc:
        _decline(f"the dashboard's parser could not be reached: {exc.strerror or exc}")
        return None
    finally:
        s.close()
    try:
        reply = json.loads(line) if line is not None else None
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        _decline("the dashboard gave no answer")
        return None
    if not reply.get("shared"):
        _decline(str(reply.get("why") or "the dashboard declined"))
        return None
    _decline("")
    return reply


def _body(python: str, additions: dict[str, str], request: dict, timeout_s: float, **more) -> dict:
    return {"python": python, "additions": additions, "timeout_s": timeout_s,
            "request": {**request, "env": argworker.environment(additions)}, **more}


def available(run_dir: str | os.PathLike[str], python: str, additions: dict[str, str]) -> bool:
    """Whether the dashboard has a warm parser that would answer :func:`ask` for ``python`` and
    ``additions`` now (the reason in :func:`last_reason` when not)."""
    return _call(run_dir, _body(python, additions, {}, _CONNECT_S, has=True), _CONNECT_S) is not None


def ask(run_dir: str | os.PathLike[str], python: str, additions: dict[str, str], request: dict,
        timeout_s: float) -> dict | None:
    """SGLang's answer to ``request`` (an :func:`backend.sglang.argworker.ask` request) from the
    dashboard's warm parser for ``python`` and ``additions``, parsed with this process's
    environment plus ``additions``; None when no such parser can answer (see the module text),
    the reason then in :func:`last_reason`."""
    reply = _call(run_dir, _body(python, additions, request, timeout_s), timeout_s)
    if reply is None:
        return None
    answer = reply.get("answer")
    if not isinstance(answer, dict):
        _decline("the dashboard's answer is not one this version reads")
        return None
    return answer
