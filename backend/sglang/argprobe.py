"""Run inside the serving environment's python: parse a launch command with SGLang's own
``prepare_server_args`` and print what it made of it.

Not imported by Specdeck: :mod:`backend.sglang.argcheck` passes this file's text to
``python -c`` with a JSON request on stdin::

    {"base": [...typed flags...], "groups": [[...], ...], "fields": ["tp_size", ...]}

``base`` is the argv the typed config produces, ``groups`` the extra arguments split at
each option.  The answer is one line on stdout, ``specdeck-argcheck: {json}``, with

* ``version``: the sglang version;
* ``ok``: false when the whole argv (base + every group) is refused, ``error`` then holds
  SGLang's own message (``ambiguous option: ...``) and ``kind`` is ``rejected``; an import
  failure gives ``kind`` ``import``;
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
import re  # noqa: E402
import warnings  # noqa: E402

PREFIX = "specdeck-argcheck: "
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _answer(obj):
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


def main():
    req = json.loads(sys.stdin.read())
    try:
        import importlib.metadata as md

        version = md.version("sglang")
    except Exception:
        version = None
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            from sglang.srt.server_args import prepare_server_args
    except BaseException as exc:  # a broken install raises anything
        _answer({"version": version, "ok": False, "kind": "import",
                 "error": f"{type(exc).__name__}: {exc}".strip()})
        return
    base, groups, fields = req["base"], req["groups"], req["fields"]
    full = list(base) + [t for g in groups for t in g]
    values, error, log = _parse(prepare_server_args, full, fields)
    notes = [ANSI.sub("", ln).strip() for ln in log.splitlines() if "deprecat" in ln.lower()]
    if error is not None:
        _answer({"version": version, "ok": False, "kind": "rejected", "error": error, "notes": notes})
        return
    base_values, base_error, base_log = _parse(prepare_server_args, base, fields)
    notes = [n for n in notes if n not in ANSI.sub("", base_log)]  # only what the extra arguments brought
    changed_by = []
    for g in groups:
        one, one_error, _ = _parse(prepare_server_args, list(base) + list(g), fields)
        if one is None or base_values is None:
            changed_by.append([])
        else:
            changed_by.append(sorted(f for f in one if one.get(f) != base_values.get(f)))
    _answer({"version": version, "ok": True, "kind": "parsed", "values": values, "base": base_values,
             "base_error": base_error, "changed_by": changed_by, "notes": notes})


if __name__ == "__main__":
    main()
