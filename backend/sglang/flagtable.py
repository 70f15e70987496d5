"""SGLang's launch flags without SGLang: the flag table and an emulation of argparse.

``flags-0.5.23.json`` lists every option of ``sglang.launch_server`` 0.5.23 (made by
``scripts/sglang_flag_table.py`` from the real parser).  :func:`flag_table` adapts it to
an older version with the differences the project knows of:

* ``--cuda-graph-max-bs-decode`` / ``-prefill`` exist from 0.5.14; before that the flag is
  ``--cuda-graph-max-bs``; 0.5.14-0.5.19 keep ``--cuda-graph-max-bs`` as a deprecated
  alias of ``-decode``; from 0.5.20 it is an ambiguous prefix and refused;
* ``--cuda-graph-bs`` likewise (its own flag before 0.5.16, an alias of ``-decode`` until
  0.5.19, ambiguous from 0.5.20);
* ``--disable-cuda-graph`` is deprecated from 0.5.14;
* before 0.5.4 the speculative flags are the eight of 0.4.x;
* before 0.5.16 ``--speculative-algorithm`` has a fixed list of choices.

:func:`emulate` reads an argv the way Python 3.11's argparse does with
``allow_abbrev=True``: exact flags and aliases first, then any unambiguous prefix; two or
more candidates are an error in argparse's own words.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from backend.sglang.version import Capabilities, capabilities

TABLE_PATH = Path(__file__).with_name("flags-0.5.23.json")
TABLE_VERSION = "0.5.23"

_SPEC_04 = ("--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
            "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-accept-threshold-single",
            "--speculative-accept-threshold-acc", "--speculative-token-map")
_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True, eq=False)
class Flag:
    flags: tuple[str, ...]
    dest: str
    kind: str = "store"           # store, store_true, store_false, store_const, boolopt, append, count, help
    nargs: Any = None             # None (one value), 0, "?", "*", "+", or a count
    type: str = "str"             # int, float, str, other (kept as text)
    default: Any = None
    choices: tuple[str, ...] | None = None
    deprecated: bool = False
    const: Any = None
    alias_of: str | None = None   # a deprecated alias: the flag it stands for

    @property
    def name(self) -> str:
        """How argparse names the action in its messages."""
        return "/".join(self.flags)


@dataclass(eq=False)
class FlagTable:
    version: str
    actions: tuple[Flag, ...]
    options: dict[str, Flag] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # every option string, in the order argparse registered them (its messages list them so)
        self.options = {s: a for a in self.actions for s in a.flags}


@lru_cache(maxsize=1)
def full_table() -> FlagTable:
    data = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    acts = []
    for row in data["actions"]:
        acts.append(Flag(flags=tuple(row["flags"]), dest=row["dest"], kind=row.get("kind", "store"),
                         nargs=row.get("nargs"), type=row.get("type", "str"), default=row.get("default"),
                         choices=tuple(row["choices"]) if row.get("choices") else None,
                         deprecated=bool(row.get("deprecated")), const=row.get("const")))
    return FlagTable(version=str(data.get("sglang", TABLE_VERSION)), actions=tuple(acts))


def table_label(caps: Capabilities) -> str:
    """How a finding names the table used for ``caps``'s version."""
    if caps.v[:3] == (0, 5, 23):
        return "SGLang 0.5.23"
    return f"SGLang {caps.version} (0.5.23's flags with the known differences of {caps.version})"


@lru_cache(maxsize=32)
def _table_for(version: str) -> FlagTable:
    caps = capabilities(version)
    base = full_table()
    acts = list(base.actions)

    def drop(*flags: str) -> None:
        acts[:] = [a for a in acts if not set(a.flags) & set(flags)]

    def find(flag: str) -> Flag | None:
        return next((a for a in acts if flag in a.flags), None)

    graph_pairs = (("--cuda-graph-max-bs", "cuda_graph_max_bs", None, "0.5.14"),
                   ("--cuda-graph-bs", "cuda_graph_bs", "+", "0.5.16"))
    for old, dest, nargs, since in graph_pairs:
        decode = find(old + "-decode")
        if decode is None:
            continue
        if not caps.at_least(since):
            # the split flags do not exist yet: the old flag is the flag
            drop(old + "-decode", old + "-prefill")
            acts.append(Flag(flags=(old,), dest=dest, nargs=nargs, type="int"))
        elif not caps.legacy_cuda_graph_max_bs_rejected:
            # the old flag is a deprecated alias of -decode
            acts.append(replace(decode, flags=(old,), deprecated=True, alias_of=old + "-decode"))
    if not caps.at_least("0.5.14"):
        drop("--cuda-graph-backend-decode", "--cuda-graph-backend-prefill")
        acts = [replace(a, deprecated=False) if "--disable-cuda-graph" in a.flags else a for a in acts]
    if not caps.at_least("0.5.4"):
        acts = [a for a in acts if not any(f.startswith("--speculative-") for f in a.flags)
                or any(f in _SPEC_04 for f in a.flags)]
        acts = [replace(a, flags=tuple(f for f in a.flags if f in _SPEC_04))
                if any(f.startswith("--speculative-") for f in a.flags) else a for a in acts]
    if not caps.at_least("0.5.16"):
        acts = [replace(a, choices=tuple(caps.algorithms)) if a.dest == "speculative_algorithm" else a
                for a in acts]
    return FlagTable(version=caps.version, actions=tuple(acts))


def flag_table(caps: Capabilities) -> FlagTable:
    """The launch flags of ``caps``'s version, as far as the project knows them."""
    return _table_for(caps.version)


# -- argparse, emulated ------------------------------------------------------------------

@dataclass
class Emulated:
    values: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    used: list[tuple[str, Flag]] = field(default_factory=list)  # (as written, action)


def _option_like(tok: str, options: dict[str, Flag]) -> bool:
    if not tok or tok[0] != "-" or tok == "-":
        return False
    if tok in options:
        return True
    if len(tok) == 1:
        return False
    if "=" in tok and tok.split("=", 1)[0] in options:
        return True
    if _NEGATIVE.match(tok):
        return False
    if " " in tok:
        return False
    return True


def _resolve(tok: str, options: dict[str, Flag]) -> tuple[Flag | None, str, str | None]:
    """(action, option as resolved, explicit value); raises ValueError for ambiguity."""
    if tok in options:
        return options[tok], tok, None
    if "=" in tok:
        opt, val = tok.split("=", 1)
        if opt in options:
            return options[opt], opt, val
    if tok.startswith("--"):
        prefix, explicit = tok.split("=", 1) if "=" in tok else (tok, None)
        matches = [s for s in options if s.startswith(prefix)]
    else:
        prefix, explicit = tok, None
        matches = [s for s in options if s == tok[:2] or s.startswith(tok)]
        if matches == [tok[:2]]:
            explicit = tok[2:] or None
    if len(matches) > 1:
        raise ValueError(f"ambiguous option: {tok} could match {', '.join(matches)}")
    if len(matches) == 1:
        return options[matches[0]], matches[0], explicit
    return None, tok, None


def _convert(action: Flag, text: str) -> Any:
    if action.type == "int":
        try:
            value: Any = int(text)
        except ValueError:
            raise ValueError(f"argument {action.name}: invalid int value: {text!r}") from None
    elif action.type == "float":
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"argument {action.name}: invalid float value: {text!r}") from None
    else:
        value = text
    if action.choices is not None and str(value) not in action.choices:
        raise ValueError(f"argument {action.name}: invalid choice: {text!r} "
                         f"(choose from {', '.join(repr(c) for c in action.choices)})")
    return value


def emulate(argv: list[str], table: FlagTable) -> Emulated:
    """Read ``argv`` as SGLang's parser would, without SGLang."""
    options = table.options
    out = Emulated()
    for a in table.actions:
        if a.dest not in out.values and a.kind != "help":
            out.values[a.dest] = a.default
    extras: list[str] = []
    i, n = 0, len(argv)
    try:
        while i < n:
            tok = argv[i]
            if tok == "--":
                extras.extend(argv[i + 1:])
                break
            if not _option_like(tok, options):
                extras.append(tok)
                i += 1
                continue
            action, opt, explicit = _resolve(tok, options)
            i += 1
            if action is None:
                extras.append(tok)
                continue
            out.used.append((tok, action))
            if action.deprecated:
                instead = f"; use {action.alias_of}" if action.alias_of else ""
                out.notes.append(f"{opt} is deprecated in {table.version}{instead}")
            if action.kind == "help":
                raise ValueError("--help prints the usage and exits")
            args: list[str] = []
            nargs = action.nargs
            if nargs == 0:
                if explicit is not None:
                    raise ValueError(f"argument {action.name}: ignored explicit argument {explicit!r}")
            elif explicit is not None:
                if nargs in ("*", "+", "?", None) or nargs == 1:
                    args = [explicit]
                else:
                    raise ValueError(f"argument {action.name}: expected {nargs} arguments")
            else:
                j = i
                while j < n and not _option_like(argv[j], options) and argv[j] != "--":
                    j += 1
                avail = argv[i:j]
                if nargs is None:
                    if not avail:
                        raise ValueError(f"argument {action.name}: expected one argument")
                    take = 1
                elif nargs == "?":
                    take = min(1, len(avail))
                elif nargs == "*":
                    take = len(avail)
                elif nargs == "+":
                    if not avail:
                        raise ValueError(f"argument {action.name}: expected at least one argument")
                    take = len(avail)
                else:
                    if len(avail) < int(nargs):
                        raise ValueError(f"argument {action.name}: expected {nargs} arguments")
                    take = int(nargs)
                args = avail[:take]
                i += take
            out.values[action.dest] = _apply(action, opt, args, out.values.get(action.dest))
    except ValueError as exc:
        out.error = str(exc)
        return out
    if extras:
        out.error = f"unrecognized arguments: {' '.join(extras)}"
    return out


def _apply(action: Flag, opt: str, args: list[str], current: Any) -> Any:
    kind = action.kind
    if kind == "boolopt":
        return not opt.startswith("--no-")
    if kind == "store_false":
        return False
    if kind == "store_const":
        return action.const
    if kind == "count":
        return (current or 0) + 1
    if action.nargs == 0:
        return True  # store_true and the deprecated store-true actions
    values = [_convert(action, a) for a in args]
    if action.nargs == "?" and not values:
        return action.const
    value = values if action.nargs in ("*", "+") or isinstance(action.nargs, int) else values[0]
    if kind == "append":
        return list(current or []) + [value]
    return value
