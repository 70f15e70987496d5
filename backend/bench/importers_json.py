"""JSON with line numbers: every object of a document knows the line it starts on.

Python's ``json`` gives values but not where they were, and a multi-record
JSON document (SpecForge's ``bench_eagle3`` results) needs a line per record
so an import can name it and be deduplicated.  The parser accepts what
``json.dumps`` writes, including ``Infinity``, ``-Infinity`` and ``NaN``; any
text it cannot read (a control character in a string, nesting past Python's
recursion limit) is a :class:`JSONTextError` with its line.
"""

from __future__ import annotations

import bisect
import json
import re
from json.decoder import scanstring

_WS = re.compile(r"[ \t\n\r]*")
_ATOM = re.compile(r"-?Infinity|NaN|true|false|null|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_ATOMS = {"true": True, "false": False, "null": None, "NaN": float("nan"),
          "Infinity": float("inf"), "-Infinity": float("-inf")}


class LDict(dict):
    """A JSON object and the 1-based line its ``{`` is on."""

    line: int = 0


class JSONTextError(ValueError):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


def load_with_lines(text: str) -> object:
    """Parse one JSON document; objects come back as :class:`LDict`."""
    newlines = [i for i, ch in enumerate(text) if ch == "\n"]

    def line_of(pos: int) -> int:
        return bisect.bisect_left(newlines, pos) + 1

    def skip(pos: int) -> int:
        return _WS.match(text, pos).end()

    def value(pos: int) -> tuple[object, int]:
        pos = skip(pos)
        if pos >= len(text):
            raise JSONTextError(line_of(pos), "the JSON document ends early")
        ch = text[pos]
        if ch == "{":
            obj = LDict()
            obj.line = line_of(pos)
            pos = skip(pos + 1)
            if text.startswith("}", pos):
                return obj, pos + 1
            while True:
                pos = skip(pos)
                if not text.startswith('"', pos):
                    raise JSONTextError(line_of(pos), "expected a quoted key in a JSON object")
                try:
                    key, pos = scanstring(text, pos + 1)
                except json.JSONDecodeError as exc:
                    raise JSONTextError(line_of(pos), f"bad JSON key: {exc.msg}") from None
                pos = skip(pos)
                if not text.startswith(":", pos):
                    raise JSONTextError(line_of(pos), f"expected ':' after the key {key!r}")
                obj[key], pos = value(pos + 1)
                pos = skip(pos)
                if text.startswith(",", pos):
                    pos += 1
                    continue
                if text.startswith("}", pos):
                    return obj, pos + 1
                raise JSONTextError(line_of(pos), "expected ',' or '}' in a JSON object")
        if ch == "[":
            arr: list = []
            pos = skip(pos + 1)
            if text.startswith("]", pos):
                return arr, pos + 1
            while True:
                item, pos = value(pos)
                arr.append(item)
                pos = skip(pos)
                if text.startswith(",", pos):
                    pos += 1
                    continue
                if text.startswith("]", pos):
                    return arr, pos + 1
                raise JSONTextError(line_of(pos), "expected ',' or ']' in a JSON array")
        if ch == '"':
            try:
                return scanstring(text, pos + 1)
            except json.JSONDecodeError as exc:
                raise JSONTextError(line_of(pos), f"bad JSON string: {exc.msg}") from None
        m = _ATOM.match(text, pos)
        if not m:
            raise JSONTextError(line_of(pos), f"not JSON: {text[pos:pos + 20]!r}")
        tok = m.group(0)
        if tok in _ATOMS:
            return _ATOMS[tok], m.end()
        return (float(tok) if any(c in tok for c in ".eE") else int(tok)), m.end()

    try:
        result, end = value(0)
    except RecursionError:
        raise JSONTextError(1, "JSON nested too deeply to be a benchmark record") from None
    end = skip(end)
    if end != len(text):
        raise JSONTextError(line_of(end), "text after the end of the JSON document")
    return result
