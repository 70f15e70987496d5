"""Write the flag table of SpecForge's training scripts (Gen-1, Gen-2) that preflight uses when the
run's python cannot ask the script's own parser (backend/train/specforge_check.py).

Run against a full git clone of SpecForge:

    .venv/bin/python scripts/specforge_flag_table.py /path/to/SpecForge > backend/train/specforge-flags.json

It walks the first-parent history of the main branch and reads, at every commit that changed one of
``scripts/train_eagle3_online.py``, ``scripts/train_eagle3_offline.py``, ``scripts/train_eagle3.py`` or
``specforge/args.py``, the options each script's parser declares: every ``add_argument`` call of the
script (options added by a ``SomeArgs.add_args(parser)`` helper are read from that class in
``specforge/args.py``), each as ``"flag"`` (takes no value), ``"value"``, ``"required"`` (takes a value
and must be given) or the list of its choices.  Nothing is
imported or run.  Consecutive commits that declare the same options collapse into one range, named by
its first commit and the commit that ended it, with their commit dates.  ``versions`` gives the dates
between which ``version.txt`` read each version, so a checkout without git history can still be placed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

SCRIPTS = {"scripts/train_eagle3_online.py": "gen1-online", "scripts/train_eagle3_offline.py": "gen1-offline",
           "scripts/train_eagle3.py": "gen2"}
HELPERS = "specforge/args.py"


def _git(repo: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=False)


def _show(repo: str, commit: str, path: str) -> str | None:
    r = _git(repo, "show", f"{commit}:{path}")
    return r.stdout if r.returncode == 0 else None


def _const(node: ast.AST):
    return node.value if isinstance(node, ast.Constant) else None


def _options(tree: ast.AST) -> tuple[dict[str, dict], list[str]]:
    """The options that ``tree``'s ``add_argument`` calls declare, and the helper classes it calls."""
    out: dict[str, dict] = {}
    helpers: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr == "add_args" and isinstance(node.func.value, ast.Name):
            helpers.append(node.func.value.id)
            continue
        if node.func.attr != "add_argument":
            continue
        names = [_const(a) for a in node.args if isinstance(_const(a), str)]
        if not names or not names[0].startswith("-"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = kw.get("action")
        action_name = (_const(action) if isinstance(action, ast.Constant)
                       else ast.unparse(action) if action is not None else "store")
        boolopt = "BooleanOptionalAction" in str(action_name)
        takes_value = action_name in ("store", "append") and _const(kw.get("nargs", ast.Constant(None))) != 0
        choices = None
        if "choices" in kw:
            try:
                value = ast.literal_eval(kw["choices"])
                choices = [str(c) for c in value]
            except ValueError:
                choices = None
        # "flag": takes no value; "value": takes one; "required": takes one and must be given; a list: the
        # value must be one of these
        if not takes_value or boolopt:
            entry = "flag"
        elif _const(kw.get("required", ast.Constant(False))):
            entry = "required"
        else:
            entry = choices if choices is not None else "value"
        for n in names:
            out[n] = entry
            if boolopt and n.startswith("--"):
                out["--no-" + n[2:]] = "flag"
    return out, helpers


def _class_options(src: str, name: str) -> dict[str, dict] | None:
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return _options(node)[0]
    return None


def options_at(repo: str, commit: str, script: str) -> dict[str, dict] | None:
    src = _show(repo, commit, script)
    if src is None:
        return None
    opts, helpers = _options(ast.parse(src))
    helper_src = _show(repo, commit, HELPERS) if helpers else None
    for h in helpers:
        more = _class_options(helper_src, h) if helper_src else None
        if more is None:
            raise SystemExit(f"{commit} {script}: the helper {h} is not a class of {HELPERS}")
        opts.update(more)
    return dict(sorted(opts.items()))


def build(repo: str) -> dict:
    log = _git(repo, "log", "--first-parent", "--reverse", "--format=%H %cI", "--", *SCRIPTS, HELPERS).stdout
    commits = [line.split() for line in log.splitlines() if line.strip()]
    ranges: dict[str, list[dict]] = {key: [] for key in SCRIPTS.values()}
    for commit, date in commits:
        for script, key in SCRIPTS.items():
            opts = options_at(repo, commit, script)
            rows = ranges[key]
            last = rows[-1] if rows else None
            if last is not None and last["until"] is None and last["options"] == opts:
                continue
            if last is not None and last["until"] is None:
                last["until"], last["until_time"] = commit[:12], date
            if opts is not None:
                rows.append({"from": commit[:12], "from_time": date, "until": None, "until_time": None,
                             "options": opts})
    versions = []
    vlog = _git(repo, "log", "--first-parent", "--reverse", "--format=%H %cI", "--", "version.txt").stdout
    for line in vlog.splitlines():
        commit, date = line.split()
        text = (_show(repo, commit, "version.txt") or "").strip()
        if versions:
            versions[-1]["until_time"] = date
        versions.append({"version": text.splitlines()[0] if text else None, "from_time": date, "until_time": None})
    head = _git(repo, "log", "-1", "--first-parent", "--format=%H %cI").stdout.split()
    return {"source": "github.com/sgl-project/SpecForge, first-parent history of main",
            "read_at": {"commit": head[0][:12], "time": head[1]},
            "scripts": {key: script for script, key in SCRIPTS.items()},
            "versions": versions, "ranges": ranges}


def dumps(table: dict) -> str:
    """``table`` as JSON with one option per line, so a new SpecForge commit shows up as a readable diff."""
    head = {k: v for k, v in table.items() if k != "ranges"}
    text = json.dumps(head, indent=1)[:-2] + ',\n "ranges": {'
    for i, (key, rows) in enumerate(table["ranges"].items()):
        text += ("," if i else "") + f"\n  {json.dumps(key)}: ["
        for j, row in enumerate(rows):
            meta = json.dumps({k: v for k, v in row.items() if k != "options"})[:-1]
            opts = ",\n".join(f"     {json.dumps(o)}: {json.dumps(e)}" for o, e in row["options"].items())
            text += ("," if j else "") + f"\n   {meta}, \"options\": {{\n{opts}\n   }}}}"
        text += "\n  ]"
    return text + "\n }\n}\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(dumps(build(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
