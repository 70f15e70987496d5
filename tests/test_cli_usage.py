"""The command line's usage text (backend/cli/__init__.py's docstring) against its parsers: every command
and subcommand registered is named there, none that is not, and each subcommand that takes ``--json``
shows it."""

from __future__ import annotations

import argparse
import re

import backend.cli as cli

PREFIX = "python -m backend.cli"


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:  # argparse keeps its subcommands in a _SubParsersAction
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions for o in a.option_strings}


def registered() -> dict[str, dict[str, set[str]]]:
    """command -> {subcommand -> its options} ({} for a command without subcommands)."""
    return {name: {sub: _options(q) for sub, q in _subparsers(p).items()}
            for name, p in _subparsers(cli.build_parser()).items()}


def usage_lines(doc: str) -> list[str]:
    """The usage lines of ``doc``, each with its continuation lines joined, without the prefix."""
    lines: list[str] = []
    for raw in doc.splitlines():
        text = raw.strip()
        if text.startswith(PREFIX):
            lines.append(text[len(PREFIX):].strip())
        elif lines and raw.startswith(" " * 20) and text[:1] in ("[", "|"):
            lines[-1] += " " + text
        elif not text:
            if lines:
                break  # the usage block ends at its first blank line
    return lines


def documented(doc: str) -> dict[str, dict[str, str]]:
    """command -> {subcommand -> the text of its part of the line} as the usage text names them."""
    out: dict[str, dict[str, str]] = {}
    for line in usage_lines(doc):
        line = re.sub(r"^\[--workspace DIR\]\s*", "", line)
        command, _, rest = line.partition(" ")
        subs = out.setdefault(command, {})
        for part in (p.strip() for p in rest.split(" | ")):
            if not part or part.startswith(("-", "[")) or not re.match(r"^[a-z][a-z-]*(\|[a-z-]+)*(\s|$)", part):
                continue  # the options or argument of a command without subcommands
            names, _, tail = part.partition(" ")
            for name in names.split("|"):
                subs[name] = (subs.get(name, "") + " " + tail).strip()
    return out


def test_usage_names_every_command_and_subcommand_and_only_those():
    have = registered()
    doc = documented(cli.__doc__)
    assert set(doc) == set(have), (set(have) ^ set(doc))
    for command, subs in have.items():
        if not subs:  # init DIR, supervise [--interval S]
            continue
        assert set(doc[command]) == set(subs), (command, set(subs) ^ set(doc[command]))


def test_usage_shows_json_where_a_subcommand_takes_it():
    doc = documented(cli.__doc__)
    missing = [f"{c} {s}" for c, subs in registered().items() for s, opts in subs.items()
               if "--json" in opts and "--json" not in doc[c][s]]
    assert not missing, f"these take --json and the usage text does not say so: {missing}"
    assert "--json" in doc["servers"]["list"] and "--json" in doc["cluster"]["status"]
    assert "--json" not in doc["cluster"]["down"]


def test_the_check_reads_the_usage_text_as_a_reader_would():
    # a usage text missing a subcommand, or naming one that is gone, is caught
    text = f"""Usage.

    {PREFIX} [--workspace DIR] servers list | preflight NAME [--json]
    {PREFIX} cluster up|down
                                            | status [--json]

More."""
    doc = documented(text)
    assert doc == {"servers": {"list": "", "preflight": "NAME [--json]"},
                   "cluster": {"up": "", "down": "", "status": "[--json]"}}
    assert "parselog" not in doc["servers"]
