"""Write the flag table Specdeck's preflight uses when SGLang itself is not importable.

Run with the python of a serving environment built from requirements-serve.txt:

    .venv-serve/bin/python scripts/sglang_flag_table.py > backend/sglang/flags-0.5.23.json

It lists every option of ``sglang.launch_server`` (all option strings, the field it sets,
how many values it takes, its value type, choices and default), one action per line, so a
new SGLang release shows up as a readable diff.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys


def _kind(action: argparse.Action) -> str:
    for cls, name in ((argparse.BooleanOptionalAction, "boolopt"), (argparse._StoreTrueAction, "store_true"),
                      (argparse._StoreFalseAction, "store_false"), (argparse._StoreConstAction, "store_const"),
                      (argparse._AppendAction, "append"), (argparse._CountAction, "count"),
                      (argparse._HelpAction, "help"), (argparse._StoreAction, "store")):
        if isinstance(action, cls):
            return name
    return "store"


def _type(action: argparse.Action) -> str:
    t = action.type
    if t in (int, float, str):
        return t.__name__
    return "str" if t is None else "other"


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def main() -> int:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    out = sys.stdout
    out.write('{"sglang": ' + json.dumps(importlib.metadata.version("sglang")) + ', "actions": [\n')
    rows = []
    for a in parser._actions:
        if not a.option_strings:
            continue
        row = {"flags": list(a.option_strings), "dest": a.dest, "kind": _kind(a),
               "nargs": a.nargs if isinstance(a.nargs, (str, type(None))) else int(a.nargs),
               "type": _type(a), "default": _plain(a.default)}
        if a.choices is not None:
            row["choices"] = sorted(str(c) for c in a.choices)
        if "deprecat" in type(a).__name__.lower() or "deprecat" in (a.help or "").lower():
            row["deprecated"] = True
        rows.append(json.dumps(row, sort_keys=False))
    out.write(",\n".join(rows) + "\n]}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
