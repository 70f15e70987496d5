"""Ask SpecForge whether it accepts a training run's command, before the run starts.

A command Specdeck writes can be refused by the SpecForge in use: a Gen-3 YAML its config loader does not
take (``deployment.disaggregated.backend`` became required in July 2026), a flag the training script of
that commit does not have (Gen-2's first release has no ``--max-num-steps``; Gen-1's offline script lost
``--batch-size`` on 2025-08-23).  Two ways to find out, as preflight does for SGLang:

* SpecForge itself, where the run's python has the ``specforge`` package: in a short-lived subprocess of
  that python, ``specforge.config.load_config`` on the YAML with the command's overrides (Gen-3), or the
  training script's own ``parse_args()`` on the exact argv (Gen-1/Gen-2: the script is loaded under
  another name than ``__main__``, so only its imports and definitions run).  A refusal is reported in
  SpecForge's words.  Answers are kept per interpreter, script (and its modification time) and argv.
* the flag table ``specforge-flags.json`` (made by ``scripts/specforge_flag_table.py`` from SpecForge's
  public history): the options of each training script per range of commits.  The range is the one of
  the checkout's commit (its git history), else those of its ``version.txt``, else every range of the
  script; argparse's matching (unique prefixes, values, choices, required options) is emulated, and a
  finding names the range.  Ranges that disagree give a warning that names the ones that refuse.

:func:`review` turns the answer into the command's notes, or a :class:`~backend.train.command.CommandError`
when SpecForge (or every range the table allows) refuses it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from backend.pyprobe import end_probe_group
from backend.train.command import CommandError, TrainCommand
from backend.train.config import TrainRunConfig
from backend.train.generation import EnvProbe, GenerationInfo

TABLE_PATH = Path(__file__).with_name("specforge-flags.json")
LOADER_TIMEOUT_S = 30.0   # pydantic and PyYAML: a second or two
PARSER_TIMEOUT_S = 90.0   # the training script imports torch, transformers and SpecForge first
MARK = "SPECDECK-SPECFORGE-CHECK "

# Flags Specdeck writes -> the run-config field that sets them (for a finding about that flag).
FLAG_FIELD = {
    "--target-model-path": "target_model", "--draft-model-config": "draft_config", "--train-data-path": "train_data",
    "--train-hidden-states-path": "train_hidden_states", "--eval-data-path": "eval_data",
    "--output-dir": "output_dir", "--chat-template": "chat_template", "--num-epochs": "num_epochs",
    "--max-num-steps": "max_steps", "--batch-size": "batch_size", "--learning-rate": "learning_rate",
    "--max-length": "max_length", "--ttt-length": "ttt_length", "--tp-size": "tp_size",
    "--save-interval": "save_interval", "--eval-interval": "eval_interval", "--log-interval": "log_interval",
    "--seed": "seed", "--report-to": "tracker.report_to", "--wandb-project": "tracker.project",
    "--wandb-name": "tracker.run_name", "--wandb-dir": "tracker.wandb_dir", "--wandb-offline": "tracker.offline",
    "--swanlab-project": "tracker.project", "--swanlab-name": "tracker.run_name",
    "--mlflow-tracking-uri": "tracker.mlflow_tracking_uri",
    "--mlflow-experiment-name": "tracker.mlflow_experiment_name", "--mlflow-run-name": "tracker.run_name",
}

# Runs in the run's python.  Reads one JSON request on stdin, answers one line: MARK + JSON with
# status "accepted", "rejected" (error: SpecForge's words) or "unavailable" (SpecForge could not be asked).
_WORKER = r"""
import contextlib, io, json, os, sys, tempfile
MARK = "SPECDECK-SPECFORGE-CHECK "
out = sys.stdout
def answer(status, error=None):
    out.write("\n" + MARK + json.dumps({"status": status, "error": error}) + "\n")
    out.flush()
    os._exit(0)
req = json.loads(sys.stdin.read())
if req["kind"] == "gen3":
    try:
        from specforge.config import load_config
    except BaseException as exc:
        answer("unavailable", "cannot import specforge.config: %s: %s" % (type(exc).__name__, exc))
    fd, path = tempfile.mkstemp(suffix=".yaml", prefix="specdeck-check-")
    refusal = None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(req["yaml"])
        try:
            load_config(path, req["overrides"])
        except Exception as exc:
            refusal = str(exc).replace(path, "<config>")
    finally:
        try:
            os.unlink(path)  # before answer(), whose os._exit skips every finally
        except OSError:
            pass
    if refusal is not None:
        answer("rejected", refusal)
    answer("accepted")
script = req["script"]
sys.argv = [script] + req["argv"]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
try:
    import runpy
    with contextlib.redirect_stdout(io.StringIO()):
        ns = runpy.run_path(script, run_name="__specdeck_check__")
except BaseException as exc:
    answer("unavailable", "cannot load %s: %s: %s" % (script, type(exc).__name__, exc))
parse = ns.get("parse_args")
if not callable(parse):
    answer("unavailable", "%s has no parse_args()" % script)
err = io.StringIO()
try:
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        parse()
except SystemExit as exc:
    if exc.code not in (0, None):
        lines = [l for l in err.getvalue().splitlines() if ": error: " in l]
        answer("rejected", lines[-1] if lines else (err.getvalue().strip() or "exit %s" % exc.code))
except Exception as exc:
    answer("rejected", "%s: %s" % (type(exc).__name__, exc))
answer("accepted")
"""


@dataclass(frozen=True)
class SpecForgeCheck:
    """What SpecForge (or the flag table) said about a command."""

    checker: str                 # "specforge" (asked), "table" (the flag table), "none" (not checked)
    source: str                  # who answered, in words
    rejected: str | None = None  # the refusal, in SpecForge's words (or the table's, with the range)
    field: str = ""              # the run-config field the refusal is about, when known
    warnings: tuple[str, ...] = ()


_answers: dict[tuple, tuple[str, str | None]] = {}
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every answer, so the next check asks SpecForge again."""
    with _cache_lock:
        _answers.clear()


# -- asking SpecForge -----------------------------------------------------------


def _ask(python: str, request: dict, cwd: str | None, timeout_s: float) -> tuple[str, str | None]:
    """(status, error) from the worker run by ``python``; ("unavailable", why) when it gave no answer."""
    try:
        proc = subprocess.Popen([python, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=cwd if cwd and Path(cwd).is_dir() else None,
                                start_new_session=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    except OSError as exc:
        return "unavailable", f"cannot run {python}: {exc.strerror or exc}"
    try:
        out, err = proc.communicate(json.dumps(request), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        end_probe_group(proc)
        return "unavailable", f"{python} did not answer within {timeout_s:g} s"
    for line in reversed(out.splitlines()):
        if line.startswith(MARK):
            try:
                d = json.loads(line[len(MARK):])
                return str(d["status"]), d.get("error")
            except (ValueError, KeyError, TypeError):
                break
    tail = (err.strip().splitlines() or ["no output"])[-1]
    return "unavailable", f"{python} exited with {proc.returncode} without an answer: {tail[:300]}"


def gen3_overrides(argv: tuple[str, ...] | list[str]) -> tuple[list[str], list[str]]:
    """The ``section.field=value`` overrides of a ``specforge train --config PATH ...`` argv, and the words
    its train command would not take (``-c/--config``, ``--role X``, ``--node-rank N`` and ``--plan`` are
    its other options)."""
    words = list(argv)
    try:
        i = words.index("train")
    except ValueError:
        return [], []
    rest = words[i + 1:]
    overrides: list[str] = []
    unknown: list[str] = []
    j = 0
    while j < len(rest):
        w = rest[j]
        if w in ("-c", "--config", "--role", "--node-rank"):
            j += 2
            continue
        if w.startswith(("--config=", "--role=", "--node-rank=")) or w == "--plan":
            j += 1
            continue
        if w.startswith("-"):
            unknown.append(w)
        elif "=" in w:
            overrides.append(w)
        else:
            unknown.append(w)
        j += 1
    return overrides, unknown


def ask_loader(python: str, yaml_text: str, overrides: list[str], *, timeout_s: float = LOADER_TIMEOUT_S,
               use_cache: bool = True) -> tuple[str, str | None]:
    """SpecForge's ``load_config`` (in ``python``) on ``yaml_text`` with ``overrides``."""
    key = ("gen3", python, yaml_text, tuple(overrides))
    return _cached(key, use_cache, lambda: _ask(python, {"kind": "gen3", "yaml": yaml_text, "overrides": overrides},
                                                None, timeout_s))


def ask_parser(python: str, script: str, argv: list[str], *, cwd: str | None = None,
               timeout_s: float = PARSER_TIMEOUT_S, use_cache: bool = True) -> tuple[str, str | None]:
    """The training script's own ``parse_args()`` (in ``python``) on ``argv``."""
    try:
        st = os.stat(script)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        return "unavailable", f"{script} cannot be read"
    key = ("script", python, script, stamp, tuple(argv))
    return _cached(key, use_cache, lambda: _ask(python, {"kind": "script", "script": script, "argv": argv},
                                                cwd, timeout_s))


def _cached(key: tuple, use_cache: bool, ask) -> tuple[str, str | None]:
    if use_cache:
        with _cache_lock:
            if key in _answers:
                return _answers[key]
    got = ask()
    if got[0] != "unavailable":  # a timeout or a broken environment is asked again next time
        with _cache_lock:
            _answers[key] = got
    return got


# -- the flag table ---------------------------------------------------------------


@lru_cache(maxsize=1)
def flag_table() -> dict:
    with open(TABLE_PATH, encoding="utf-8") as f:
        return json.load(f)


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def range_label(key: str, rows: list[dict]) -> str:
    """``Gen-2 scripts/train_eagle3.py of 2025-11-20 (2ab6da7a) to 2025-11-27 (3df5b27b)``: the span of
    consecutive ``rows`` (the start of the first to the end of the last)."""
    script = flag_table()["scripts"][key]
    gen = "Gen-1" if key.startswith("gen1") else "Gen-2"
    first, last = rows[0], rows[-1]
    end = (f"to {last['until_time'][:10]} ({last['until'][:8]})" if last["until"] else "on")
    return f"SpecForge {gen} {script} of {first['from_time'][:10]} ({first['from'][:8]}) {end}"


def emulate(options: dict[str, object], argv: list[str]) -> list[tuple[str, str]]:
    """What argparse says about ``argv`` for a parser with ``options`` (the table's form): ``[]`` when it
    accepts them, else its one refusal as ``[(flag, message)]`` in argparse's words.  As argparse does, an
    ambiguous prefix, a missing value or a wrong choice stops at once; then missing required options; then
    every word nothing took."""
    given: set[str] = set()
    unrecognized: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("-") or tok == "-" or _number(tok):
            unrecognized.append(tok)
            continue
        name, eq, inline = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        if name in options:
            opt = name
        else:
            matches = [o for o in options if o.startswith(name)] if name.startswith("--") else []
            if len(matches) > 1:
                return [(name, f"ambiguous option: {name} could match {', '.join(sorted(matches))}")]
            if not matches:
                unrecognized.append(tok)
                continue
            opt = matches[0]
        kind = options[opt]
        given.add(opt)
        if kind == "flag":
            if eq:
                return [(name, f"argument {opt}: ignored explicit argument {inline!r}")]
            continue
        if eq:
            value = inline
        elif i < len(argv) and not (argv[i].startswith("-") and not _number(argv[i])):
            value = argv[i]
            i += 1
        else:
            return [(name, f"argument {opt}: expected one argument")]
        if isinstance(kind, list) and value not in kind:
            return [(name, f"argument {opt}: invalid choice: {value!r} (choose from "
                           f"{', '.join(repr(c) for c in kind)})")]
    missing = [o for o, k in options.items() if k == "required" and o not in given]
    if missing:
        return [(missing[0], f"the following arguments are required: {', '.join(missing)}")]
    if unrecognized:
        first = next((t for t in unrecognized if t.startswith("-")), unrecognized[0])
        return [(first.partition("=")[0], f"unrecognized arguments: {' '.join(unrecognized)}")]
    return []


def _number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def table_key(generation: str, offline: bool) -> str:
    return "gen2" if generation == "gen2" else ("gen1-offline" if offline else "gen1-online")


def candidate_rows(key: str, *, when: datetime | None = None, version: str | None = None) -> tuple[list[dict], str]:
    """The table's ranges of ``key`` that a checkout of commit time ``when`` (else of ``version``) may be,
    and how they were chosen."""
    table = flag_table()
    rows = table["ranges"][key]
    if when is not None:
        hit = [r for r in rows if _time(r["from_time"]) <= when and (r["until"] is None or when < _time(r["until_time"]))]
        if hit:
            return hit, f"the checkout's commit of {when.date()}"
        return rows, (f"the checkout's commit of {when.date()} is outside the script's history in the table; "
                      "every range")
    if version:
        windows = [v for v in table["versions"] if v["version"] == version.strip()]
        if windows:
            hit = []
            for r in rows:
                start, end = _time(r["from_time"]), _time(r["until_time"])
                if any((w["until_time"] is None or start < _time(w["until_time"])) and
                       (end is None or _time(w["from_time"]) < end) for w in windows):
                    hit.append(r)
            if hit:
                return hit, f"version {version}"
    return rows, "the checkout's commit is not known: every range"


def table_check(key: str, argv: list[str], *, when: datetime | None = None,
                version: str | None = None) -> SpecForgeCheck:
    """The flag table's answer for ``argv`` (the flags after the script)."""
    rows, how = candidate_rows(key, when=when, version=version)
    results = [emulate(r["options"], argv) for r in rows]
    span = range_label(key, rows)
    if not any(results):
        return SpecForgeCheck("table", f"flag table, {span} ({how})")
    # consecutive ranges that say the same, each with what it says
    groups: list[tuple[list[dict], list[tuple[str, str]]]] = []
    for row, res in zip(rows, results):
        if groups and groups[-1][1] == res:
            groups[-1][0].append(row)
        else:
            groups.append(([row], res))
    if all(results):
        g_rows, res = groups[-1]  # the newest refusal names the field; every group is listed
        said = "; ".join(f"{range_label(key, gr)}: {'; '.join(m for _, m in rs)}" for gr, rs in groups)
        return SpecForgeCheck("table", f"flag table ({how})", rejected=said, field=FLAG_FIELD.get(res[0][0], ""))
    warnings = tuple(f"{range_label(key, gr)} would refuse this command: {'; '.join(m for _, m in rs)} "
                     f"({how}; other ranges accept it)" for gr, rs in groups if rs)
    return SpecForgeCheck("table", f"flag table, {span} ({how})", warnings=warnings)


def checkout_time(specforge_dir: str | None, timeout_s: float = 10.0) -> datetime | None:
    """The commit time of the checkout's HEAD, from its git history; None without one."""
    if not specforge_dir or not (Path(specforge_dir) / ".git").exists():
        return None
    try:
        r = subprocess.run(["git", "-C", specforge_dir, "log", "-1", "--format=%cI"], capture_output=True,
                           text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    try:
        return datetime.fromisoformat(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None
    except ValueError:
        return None


# -- the check of a command -------------------------------------------------------------


def _script_argv(cmd: TrainCommand, generation: str) -> tuple[str, list[str]] | None:
    names = ("scripts/train_eagle3.py",) if generation == "gen2" else (
        "scripts/train_eagle3_online.py", "scripts/train_eagle3_offline.py")
    for i, word in enumerate(cmd.argv):
        if any(word.endswith("/" + n) or word == n for n in names):
            return word, list(cmd.argv[i + 1:])
    return None


def check_command(cfg: TrainRunConfig, cmd: TrainCommand, probe: EnvProbe | None, *,
                  specforge_dir: str | None = None, version: str | None = None) -> SpecForgeCheck:
    """Whether the SpecForge of the run takes ``cmd``: asked where ``probe`` (the run's python) has the
    package, else from the flag table (Gen-1/Gen-2); ``none`` for a module or script entry."""
    python = cfg.python
    has_pkg = probe is not None and probe.ok and probe.package_dir is not None
    if cfg.entry_kind != "specforge":
        return SpecForgeCheck("none", f"entry {cfg.entry!r} is not SpecForge's own entry point")
    if cmd.generation == "gen3":
        overrides, unknown = gen3_overrides(cmd.argv)
        if unknown:
            return SpecForgeCheck("table", "specforge train's options",
                                  rejected=f"specforge train takes -c/--config, --role, --node-rank, --plan and "
                                           f"section.field=value overrides, not {' '.join(unknown)}",
                                  field="extra_args")
        if not has_pkg:
            why = probe.error if probe is not None and not probe.ok else f"{python} has no specforge package"
            return SpecForgeCheck("none", "not checked", warnings=(
                f"the Gen-3 YAML was not checked by SpecForge's loader: {why}",))
        status, error = ask_loader(python, cmd.yaml_text or "", overrides)
        who = f"SpecForge {probe.version or ''} load_config ({python})".replace("  ", " ")
        if status == "accepted":
            return SpecForgeCheck("specforge", who)
        if status == "rejected":
            return SpecForgeCheck("specforge", who, rejected=error or "refused", field=_yaml_field(error))
        return SpecForgeCheck("none", "not checked", warnings=(
            f"the Gen-3 YAML was not checked by SpecForge's loader: {error}",))
    found = _script_argv(cmd, cmd.generation)
    if found is None:
        return SpecForgeCheck("none", "the command runs no SpecForge training script")
    script, argv = found
    said: list[str] = []
    if has_pkg:
        status, error = ask_parser(python, script, argv, cwd=cmd.cwd)
        who = f"{Path(script).name}'s parse_args ({python})"
        if status == "accepted":
            return SpecForgeCheck("specforge", who)
        if status == "rejected":
            return SpecForgeCheck("specforge", who, rejected=error or "refused", field=_flag_field(error))
        said.append(f"SpecForge's own parser could not be asked ({error}); checked against the flag table")
    key = table_key(cmd.generation, bool(cfg.train_hidden_states))
    res = table_check(key, argv, when=checkout_time(specforge_dir), version=version)
    return SpecForgeCheck(res.checker, res.source, rejected=res.rejected, field=res.field,
                          warnings=tuple(said) + res.warnings)


def _yaml_field(error: str | None) -> str:
    """``gen3_yaml`` when the loader names a YAML field (pydantic's ``a.b.c`` line), else empty."""
    return "gen3_yaml" if error and "validation error" in error else ""


def _flag_field(error: str | None) -> str:
    if not error:
        return ""
    for word in error.replace(",", " ").split():
        flag = word.partition("=")[0]
        if flag in FLAG_FIELD:
            return FLAG_FIELD[flag]
    return ""


def review(cfg: TrainRunConfig, cmd: TrainCommand, info: GenerationInfo, probe: EnvProbe | None, *,
           specforge_dir: str | None = None) -> tuple[str, ...]:
    """The notes of SpecForge's answer about ``cmd``; raises :class:`CommandError` when it refuses it."""
    res = check_command(cfg, cmd, probe, specforge_dir=specforge_dir, version=info.version)
    if res.rejected:
        raise CommandError(cfg.name, [(res.field, f"{res.source} refuses the command: {res.rejected}")])
    notes = list(res.warnings)
    if res.checker == "specforge":
        notes.append(f"{res.source} accepts the command")
    elif res.checker == "table":
        notes.append(f"{res.source}: every flag is accepted")
    return tuple(notes)


__all__ = ["SpecForgeCheck", "ask_loader", "ask_parser", "check_command", "checkout_time", "clear_cache",
           "emulate", "flag_table", "gen3_overrides", "review", "table_check"]
