"""Where a key stands in TOML text: the line of a dotted location (``('server', 1, 'port')``), the
location written as a key (``server[1].port``), and a pydantic error as ``path:line: key: why``.  Every
check of specdeck.toml names its problems this way."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def describe_error(err: Any, text: str, path: Path | str) -> str:
    loc = tuple(err.get("loc", ()))
    key = dotted(loc)
    msg = err.get("msg", "invalid")
    if err.get("type") == "extra_forbidden":
        msg = "unknown key (check its spelling)"
    elif err.get("type") == "missing":
        msg = "required key is missing"
    line = locate(text, loc)
    where = f"{path}:{line}" if line else str(path)
    return f"{where}: {key or '(top level)'}: {msg}"


def dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def locate(text: str, loc: tuple) -> int | None:
    """Best-effort line number of ``loc`` (e.g. ('process', 1, 'argv')) in TOML text."""
    lines = text.splitlines()
    start, end = 0, len(lines)
    i = 0
    parts = list(loc)
    table = ""
    while i < len(parts):
        part = parts[i]
        if isinstance(part, str) and i + 1 < len(parts) and isinstance(parts[i + 1], int):
            # array of tables: find the Nth [[part]] header inside the range
            header = re.compile(r"^\s*\[\[\s*" + re.escape((table + "." if table else "") + part) + r"\s*\]\]")
            hits = [n for n in range(start, end) if header.match(lines[n])]
            idx = parts[i + 1]
            if idx < len(hits):
                start = hits[idx]
                end = next((n for n in range(start + 1, end) if re.match(r"^\s*\[", lines[n])
                            and not re.match(r"^\s*\[\s*" + re.escape(part) + r"\.", lines[n])), end)
                table = (table + "." if table else "") + part
                i += 2
                continue
            return start + 1 if hits else None
        if isinstance(part, str):
            # A dotted key (readiness.timeout_s = 0) names several parts at once.
            keys: list[str] = []
            for p in parts[i:]:
                if not isinstance(p, str):
                    break
                keys.append(p)
            for k in range(len(keys), 1, -1):
                dotted_re = re.compile(r"^\s*" + r"\s*\.\s*".join(re.escape(p) for p in keys[:k]) + r"\s*=")
                hit = next((n for n in range(start, end) if dotted_re.match(lines[n])), None)
                if hit is not None:
                    return hit + 1
            key_re = re.compile(r"^\s*" + re.escape(part) + r"\s*=")
            sub_re = re.compile(r"^\s*\[\s*" + re.escape((table + "." if table else "") + part) + r"\s*\]")
            for n in range(start, end):
                if key_re.match(lines[n]) or sub_re.match(lines[n]):
                    if sub_re.match(lines[n]):
                        start = n
                        table = (table + "." if table else "") + part
                        break
                    return n + 1
            else:
                return start + 1 if start or i else None
            i += 1
            continue
        i += 1
    return start + 1 if loc else None
