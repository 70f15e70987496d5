"""Run inside the serving environment's python: parse launch commands with SGLang's own
``prepare_server_args`` and say what it made of them.

Not imported by Specdeck: :mod:`backend.sglang.argworker` starts
``python -c <this file's text> serve IDLE_S``, which imports sglang once (seconds) and then
answers one request per line of stdin, each parsed in a forked child (tens of
milliseconds; whatever a parse changes in the process, such as the environment, goes with
the child).  It ends when stdin closes or after IDLE_S seconds without a request.
A request is one line of JSON::

    {"base": [...typed flags...], "groups": [[...], ...], "fields": ["tp_size", ...], "env": {...}}

``base`` is the argv the typed config produces, ``groups`` the extra arguments split at
each option, ``env`` the environment to parse in.  Each answer is one line on stdout, ``specdeck-argcheck: {json}``, with

* ``version``: the sglang version;
* ``ok``: false when the whole argv (base + every group) is refused, ``error`` then holds
  SGLang's own message (``ambiguous option: ...``) and ``kind`` is ``rejected``; an import
  failure gives ``kind`` ``import``; a parse that crashed its child, ``failed``;
* ``values`` / ``base``: the requested fields after the whole argv and after ``base`` alone;
* ``changed_by``: per group, the requested fields that base + that group alone changes;
* ``notes``: what SGLang printed about deprecated flags in the extra arguments.

It uses only the standard library besides sglang, so it runs in any serving environment.
"""

import sys

# ``python -c`` puts the current folder first on sys.path; a stray module there must not
# shadow what sglang imports.
sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import select  # noqa: E402
import warnings  # noqa: E402

PREFIX = "specdeck-argcheck: "
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _answer(obj):
    # on a line of its own, whatever sglang may have left on stdout
    sys.stdout.write("\n" + PREFIX + json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _error_text(captured, exc):
    """argparse writes usage and ``prog: error: message`` before exiting 2; keep the message."""
    for line in reversed(captured.splitlines()):
        if ": error: " in line:
            return line.split(": error: ", 1)[1].strip()
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _parse(prepare, argv, fields):
    """(values, None, log) or (None, message, log)."""
    buf = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(buf), \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        try:
            args = prepare(list(argv))
        except SystemExit as exc:
            return None, _error_text(buf.getvalue(), exc), buf.getvalue()
        except Exception as exc:  # ServerArgs refused a value
            return None, _error_text("", exc), buf.getvalue()
    log = buf.getvalue() + "".join(f"{w.message}\n" for w in caught)
    return {f: _plain(getattr(args, f)) for f in fields if hasattr(args, f)}, None, log


def _load():
    """(version, prepare_server_args or None, import error or None)."""
    try:
        import importlib.metadata as md

        version = md.version("sglang")
    except Exception:
        version = None
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            from sglang.srt.server_args import prepare_server_args
    except BaseException as exc:  # a broken install raises anything
        return version, None, f"{type(exc).__name__}: {exc}".strip()
    return version, prepare_server_args, None


def _reply(version, prepare, import_error, req):
    if "env" in req:  # the environment of the moment (this is a fork: it goes with it)
        os.environ.clear()
        os.environ.update(req["env"])
    if prepare is None:
        return {"version": version, "ok": False, "kind": "import", "error": import_error}
    base, groups, fields = req["base"], req["groups"], req["fields"]
    full = list(base) + [t for g in groups for t in g]
    values, error, log = _parse(prepare, full, fields)
    notes = [ANSI.sub("", ln).strip() for ln in log.splitlines() if "deprecat" in ln.lower()]
    if error is not None:
        return {"version": version, "ok": False, "kind": "rejected", "error": error, "notes": notes}
    base_values, base_error, base_log = _parse(prepare, base, fields)
    notes = [n for n in notes if n not in ANSI.sub("", base_log)]  # only what the extra arguments brought
    changed_by = []
    for g in groups:
        one, one_error, _ = _parse(prepare, list(base) + list(g), fields)
        if one is None or base_values is None:
            changed_by.append([])
        else:
            changed_by.append(sorted(f for f in one if one.get(f) != base_values.get(f)))
    return {"version": version, "ok": True, "kind": "parsed", "values": values, "base": base_values,
            "base_error": base_error, "changed_by": changed_by, "notes": notes}


def _lines(fd, idle_s):
    """Lines of ``fd`` as they come; stops at end of input or after ``idle_s`` without a byte."""
    buf = b""
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line
        ready, _, _ = select.select([fd], [], [], idle_s)
        if not ready:
            return
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        buf += chunk


def _one(version, prepare, import_error, line):
    """Answer one request line in a forked child; the child's changes end with it."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _answer(_reply(version, prepare, import_error, json.loads(line)))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        _answer({"version": version, "ok": False, "kind": "failed",
                 "error": f"the parse ended with {how} before answering"})


def serve(idle_s):
    version, prepare, import_error = _load()
    for line in _lines(sys.stdin.fileno(), idle_s):
        if line.strip():
            _one(version, prepare, import_error, line)


if __name__ == "__main__":
    serve(float(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "serve" else 1800.0)
