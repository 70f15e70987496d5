"""Check a server's launch command the way SGLang will read it.

argparse accepts any unambiguous prefix of a flag and every alias, so ``extra_args``
can quietly replace what the typed config says (``--speculative-algo EAGLE`` turns
EAGLE3 into EAGLE, ``--tp 2`` changes the tensor parallelism) or be refused at start
(``--cuda-graph-max-bs`` in 0.5.20+).  Two ways to find out:

* SGLang's own parser: when the serving python has sglang, ``prepare_server_args`` runs
  there on the exact argv (in a warm parser process, :mod:`backend.sglang.argworker`, or
  the dashboard's, lent to the command line by :mod:`backend.sglang.argshare`; answers
  cached per python and argv);
* the flag table: otherwise argparse's prefix and alias matching is emulated against
  the option list of SGLang 0.5.23 (``flags-0.5.23.json``, made by
  ``scripts/sglang_flag_table.py``) with the documented differences of older versions.

Both answer with an :class:`ArgvCheck` in the same shape; :func:`argv_findings` turns
it into preflight findings.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from backend.sglang import argshare, argworker
from backend.sglang.config import ServerConfig
from backend.sglang.findings import Finding
from backend.sglang.flagtable import Emulated, emulate, flag_table, full_table, table_label
from backend.sglang.launch import build_env, server_args
from backend.sglang.version import Capabilities, detect_version, parse_version

PROBE_TIMEOUT_S = 60.0

# ServerArgs field -> the config field that sets it
COMPARED: tuple[tuple[str, str], ...] = (
    ("model_path", "model_path"),
    ("served_model_name", "served_model_name"),
    ("host", "host"),
    ("port", "port"),
    ("tp_size", "tp_size"),
    ("mem_fraction_static", "mem_fraction_static"),
    ("page_size", "page_size"),
    ("attention_backend", "attention_backend"),
    ("trust_remote_code", "trust_remote_code"),
    ("speculative_algorithm", "speculative.algorithm"),
    ("speculative_draft_model_path", "speculative.draft_model_path"),
    ("speculative_num_steps", "speculative.num_steps"),
    ("speculative_eagle_topk", "speculative.eagle_topk"),
    ("speculative_num_draft_tokens", "speculative.num_draft_tokens"),
    ("disable_cuda_graph", "cuda_graph.disable"),
    ("cuda_graph_max_bs_decode", "cuda_graph.max_bs"),
    ("cuda_graph_max_bs", "cuda_graph.max_bs"),
    ("enable_metrics", "enable_metrics"),
    ("decode_log_interval", "decode_log_interval"),
)
CONFIG_FIELD = dict(COMPARED)


@dataclass(frozen=True)
class Override:
    """An extra argument that changes a field the typed config sets."""

    dest: str            # the ServerArgs field
    config_field: str    # the config field that should say it
    typed: Any           # what the typed argv alone gives
    got: Any             # what the whole argv gives
    by: tuple[str, ...]  # the extra argument(s) responsible, as written
    flags: tuple[str, ...] = ()  # the option of each, as written (``--speculative-algo``)


@dataclass
class ArgvCheck:
    """What SGLang (or the flag table) made of a launch command."""

    checker: str                  # "sglang" (its own parser) or "table" (Specdeck's emulation)
    version: str                  # the sglang version that parsed it, or the table's
    python: str
    rejected: str | None = None   # the parser's refusal, in its own words
    overrides: list[Override] = field(default_factory=list)
    typed_mismatch: list[tuple[str, Any, Any]] = field(default_factory=list)  # (config field, config, parsed)
    notes: list[str] = field(default_factory=list)       # deprecations SGLang printed
    fallback_reason: str | None = None                   # why the table was used
    import_error: str | None = None                      # sglang installed but its parser would not load
    extra_groups: list[list[str]] = field(default_factory=list)

    @property
    def checked_by(self) -> str:
        if self.checker == "sglang":
            return f"checked by SGLang {self.version}'s own parser"
        return f"checked against Specdeck's flag table for {self.version}"


def split_groups(extra: list[str]) -> list[list[str]]:
    """``["--tp", "2", "--enable-x", "--foo=1"]`` -> ``[["--tp", "2"], ["--enable-x"], ["--foo=1"]]``.

    A group starts at each token that looks like an option (``-x``/``--x``, not a number).
    Leading values without an option form a group of their own.
    """
    groups: list[list[str]] = []
    for tok in extra:
        if _is_option(tok) or not groups:
            groups.append([tok])
        else:
            groups[-1].append(tok)
    return groups


def _is_option(tok: str) -> bool:
    if not tok.startswith("-") or tok in ("-", "--"):
        return False
    try:
        float(tok)
        return False
    except ValueError:
        return True


# -- SGLang's own parser ---------------------------------------------------------

_cache: dict[tuple[str, tuple[str, ...], tuple[str, ...]], dict] = {}
_cache_lock = threading.Lock()
_borrow_dir: str | None = None  # a workspace run/ folder whose dashboard lends its warm parsers
_answered_by = threading.local()


def borrow_from(run_dir: str | os.PathLike[str] | None) -> None:
    """Ask the dashboard serving ``run_dir`` (:mod:`backend.sglang.argshare`) before starting a
    parser in this process; None stops asking.  For the command line, a process of its own."""
    global _borrow_dir
    _borrow_dir = None if run_dir is None else os.fspath(run_dir)


def answered_by() -> str:
    """Who answered this thread's last :func:`run_probe`: "cache", "dashboard" (its warm parser),
    "parser" (this process's), or "" before any."""
    return getattr(_answered_by, "who", "")


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def run_probe(python: str, base: list[str], groups: list[list[str]], *, env: dict[str, str] | None = None,
              timeout_s: float = PROBE_TIMEOUT_S, use_cache: bool = True) -> dict:
    """SGLang's own reading of ``base`` + ``groups`` in interpreter ``python``.

    Asked of the warm parser for that python and environment (:mod:`backend.sglang.argworker`:
    only its first request waits for sglang's import); no answer within ``timeout_s`` ends it.
    Answers the probe's JSON, or ``{"ok": False, "kind": "failed", "error": ...}`` when it
    gave none.  Answers are cached per (python, argv) for the life of the process; failures
    are not.
    """
    key = (python, tuple(base), tuple(t for g in groups for t in (*g, "\0")))
    if use_cache:
        with _cache_lock:
            if key in _cache:
                _answered_by.who = "cache"
                return _cache[key]
    request = {"base": base, "groups": groups, "fields": [d for d, _ in COMPARED]}
    answer = None
    if _borrow_dir is not None and argworker.existing(python, env or {}) is None:
        answer = argshare.ask(_borrow_dir, python, env or {}, request, timeout_s)
    _answered_by.who = "dashboard" if answer is not None else "parser"
    if answer is None:
        answer = argworker.ask(python, env or {}, request, timeout_s)
    if answer.get("kind") in ("parsed", "rejected", "import"):
        with _cache_lock:
            _cache[key] = answer
    return answer


def warm_parser(cfg: ServerConfig, caps: Capabilities) -> None:
    """Start SGLang's parser for ``cfg``'s launch now, so that its first check need not wait
    for sglang's import.  Never waits (a thread looks for sglang and starts the parser);
    nothing happens for a simulated server or where sglang is not installed."""
    if cfg.simulate:
        return
    python, additions = serving_python(cfg), build_env(cfg, caps)

    def go() -> None:
        if detect_version(python) is not None:
            argworker.warm(python, additions)

    threading.Thread(target=go, name=f"argcheck-warm-{cfg.name}", daemon=True).start()


def slow_first_check(cfg: ServerConfig, caps: Capabilities, run_dir: str | os.PathLike[str]) -> str | None:
    """For a process of its own (the command line): why checking ``cfg``'s launch command will
    wait for sglang's import here, or None when it will not (a simulated server, no sglang for its
    python, a parser of this process already warm, or the dashboard serving ``run_dir`` lending
    its warm parser)."""
    if cfg.simulate:
        return None
    python = serving_python(cfg)
    if detect_version(python) is None:
        return None
    additions = build_env(cfg, caps)
    if argworker.existing(python, additions) is not None or argshare.available(run_dir, python, additions):
        return None
    return argshare.last_reason()


# -- the check ------------------------------------------------------------------------

def typed_argv(cfg: ServerConfig, caps: Capabilities) -> list[str]:
    """The flags the typed config alone produces (no extra_args)."""
    return server_args(cfg.model_copy(update={"extra_args": []}), caps)


def serving_python(cfg: ServerConfig) -> str:
    """The interpreter the launch runs (the simulator runs in Specdeck's own)."""
    return sys.executable if cfg.simulate else cfg.python


def check_argv(cfg: ServerConfig, caps: Capabilities, *, env: dict[str, str] | None = None,
               timeout_s: float = PROBE_TIMEOUT_S) -> ArgvCheck:
    """Read the launch command with SGLang's parser when the serving python has sglang, else
    with the flag table of ``caps``'s version.  The parser runs with the environment the
    launch gets (``env`` defaults to the server's own additions)."""
    base = typed_argv(cfg, caps)
    if env is None:
        env = build_env(cfg, caps)
    groups = split_groups([str(x) for x in cfg.extra_args])
    python = serving_python(cfg)
    installed = detect_version(python)
    reason: str
    import_error = None
    if installed is None:
        reason = f"sglang is not installed for {python}"
    else:
        ans = run_probe(python, base, groups, env=env, timeout_s=timeout_s)
        kind = ans.get("kind")
        if kind in ("parsed", "rejected"):
            return _from_answer(cfg, ans, python, groups)
        if kind == "import":
            import_error = str(ans.get("error"))
            reason = f"sglang {installed} is installed for {python} but its parser does not load ({import_error})"
        else:
            reason = f"SGLang's parser could not be run with {python} ({ans.get('error')})"
    check = _from_emulation(cfg, caps, python, base, groups)
    check.fallback_reason = reason
    check.import_error = import_error
    return check


def _from_answer(cfg: ServerConfig, ans: dict, python: str, groups: list[list[str]]) -> ArgvCheck:
    check = ArgvCheck(checker="sglang", version=str(ans.get("version") or "?"), python=python,
                      notes=list(ans.get("notes") or []), extra_groups=groups)
    if not ans.get("ok"):
        check.rejected = str(ans.get("error") or "refused")
        return check
    values, base = ans.get("values") or {}, ans.get("base") or {}
    changed_by = ans.get("changed_by") or [[] for _ in groups]
    _compare(check, cfg, values, base, changed_by, groups)
    return check


def _from_emulation(cfg: ServerConfig, caps: Capabilities, python: str, base: list[str],
                    groups: list[list[str]]) -> ArgvCheck:
    table = flag_table(caps)
    check = ArgvCheck(checker="table", version=table_label(caps), python=python, extra_groups=groups)
    full: Emulated = emulate(base + [t for g in groups for t in g], table)
    typed = emulate(base, table)
    check.notes = [n for n in full.notes if n not in typed.notes]
    if full.error:
        check.rejected = full.error
        return check
    changed_by = []
    for g in groups:
        one = emulate(base + g, table)
        changed_by.append([] if one.error else sorted(d for d in one.values
                                                      if one.values.get(d) != typed.values.get(d)))
    _compare(check, cfg, full.values, typed.values, changed_by, groups)
    return check


def _norm(dest: str, value: Any) -> Any:
    if dest == "speculative_algorithm" and isinstance(value, str):
        return value.strip().upper() or None
    if isinstance(value, float) and value.is_integer() and dest not in ("mem_fraction_static",):
        return int(value)
    return value


def _expected(cfg: ServerConfig) -> dict[str, Any]:
    """What the typed config says, for the fields it sets explicitly."""
    spec = cfg.speculative
    out: dict[str, Any] = {"model_path": cfg.model_path, "host": cfg.host, "port": cfg.port,
                           "tp_size": cfg.tp_size, "trust_remote_code": cfg.trust_remote_code,
                           "speculative_algorithm": spec.algorithm, "enable_metrics": cfg.enable_metrics}
    for dest, value in (("served_model_name", cfg.served_model_name),
                        ("mem_fraction_static", cfg.mem_fraction_static), ("page_size", cfg.page_size),
                        ("attention_backend", cfg.attention_backend),
                        ("decode_log_interval", cfg.decode_log_interval)):
        if value is not None:
            out[dest] = value
    if spec.algorithm:
        for dest, value in (("speculative_draft_model_path", spec.draft_model_path),
                            ("speculative_num_steps", spec.num_steps),
                            ("speculative_eagle_topk", spec.eagle_topk),
                            ("speculative_num_draft_tokens", spec.num_draft_tokens)):
            if value is not None:
                out[dest] = value
    if cfg.cuda_graph.disable:
        out["disable_cuda_graph"] = True
    elif cfg.cuda_graph.max_bs is not None:
        # one of the two exists in a given version; the other is skipped
        out["cuda_graph_max_bs_decode"] = out["cuda_graph_max_bs"] = cfg.cuda_graph.max_bs
    return out


def _compare(check: ArgvCheck, cfg: ServerConfig, values: dict, base: dict, changed_by: list[list[str]],
             groups: list[list[str]]) -> None:
    for dest, cfg_field in COMPARED:
        if dest not in values or dest not in base:
            continue
        got, typed = _norm(dest, values[dest]), _norm(dest, base[dest])
        if got == typed:
            continue
        hits = [g for g, changed in zip(groups, changed_by) if dest in changed]
        check.overrides.append(Override(dest, cfg_field, typed, got,
                                        tuple(" ".join(g) for g in hits) or ("extra_args",),
                                        tuple(g[0] for g in hits)))
    for dest, want in _expected(cfg).items():
        if dest in base and _norm(dest, base[dest]) != _norm(dest, want):
            check.typed_mismatch.append((CONFIG_FIELD[dest], want, base[dest]))


# -- findings ------------------------------------------------------------------------

_SPEC_FIELDS = {"speculative_algorithm": "algorithm", "speculative_draft_model_path": "draft_model_path",
                "speculative_num_steps": "num_steps", "speculative_eagle_topk": "eagle_topk",
                "speculative_num_draft_tokens": "num_draft_tokens"}


def effective_config(cfg: ServerConfig, check: ArgvCheck) -> ServerConfig | None:
    """``cfg`` with the speculative fields the extra arguments override, or None when they
    override none (or the result does not validate)."""
    spec = {_SPEC_FIELDS[o.dest]: o.got for o in check.overrides if o.dest in _SPEC_FIELDS}
    if not spec:
        return None
    try:
        return cfg.model_copy(update={"speculative": cfg.speculative.model_validate(
            {**cfg.speculative.model_dump(), **spec})})
    except ValueError:
        return None


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def _how_read(token: str, dest: str) -> str:
    """How argparse reads ``token``: '--tp is an abbreviation of --tp-size' (0.5.23's table)."""
    table = full_table()
    opt = token.split("=", 1)[0]
    primary = next((a.flags[0] for a in table.actions if a.dest == dest), None)
    if primary is None or opt == primary:
        return ""
    if opt in table.options:
        return f"; {opt} is an alias of {primary}"
    if primary.startswith(opt):
        return f"; argparse takes {opt} as an abbreviation of {primary}"
    return ""


def _fix_for_rejection(msg: str, version: str) -> str:
    if msg.startswith("ambiguous option:"):
        opt = msg.split(":", 1)[1].split(" could match ", 1)[0].strip().split("=", 1)[0]
        cands = msg.split(" could match ", 1)[1] if " could match " in msg else ""
        if opt.startswith("--cuda-graph-max-bs"):
            return ("Remove it from extra_args and set cuda_graph.max_bs in the config; the launch builder "
                    "writes the flag each version takes (--cuda-graph-max-bs-decode from 0.5.14).")
        return f"Write the flag in full in extra_args: one of {cands}."
    if msg.startswith("unrecognized arguments:"):
        return f"Remove it from extra_args, or check its spelling against SGLang {version}'s flags."
    return "Fix the value in extra_args (or the config field it comes from)."


def _same_release(a: str, b: str) -> bool | None:
    try:
        return parse_version(a) == parse_version(b)
    except ValueError:
        return None


def argv_findings(check: ArgvCheck, cfg: ServerConfig) -> list[Finding]:
    """Preflight findings for one argv check, ending with the summary of who checked it."""
    out: list[Finding] = []
    by = check.checked_by
    if check.import_error:
        out.append(Finding("warning", "sglang-import-failed",
                           f"sglang is installed for {check.python} but its argument parser does not load there: "
                           f"{check.import_error}. The server will most likely fail the same way when it starts.",
                           "Repair the serving environment (pip check), or rebuild it from requirements-serve.txt.",
                           "python"))
    if check.checker == "sglang" and cfg.sglang_version and _same_release(cfg.sglang_version, check.version) is False:
        out.append(Finding("warning", "sglang-version-mismatch",
                           f"sglang_version in the config says {cfg.sglang_version}, but {check.python} has sglang "
                           f"{check.version}: the launch command, log parsing and endpoints follow "
                           f"{cfg.sglang_version}, the server will be {check.version}.",
                           f"Set sglang_version = \"{check.version}\" or remove it (the installed version is "
                           "detected).", "sglang_version"))
    if check.rejected:
        extra = " ".join(str(x) for x in cfg.extra_args)
        out.append(Finding("error", "argv-rejected",
                           f"SGLang refuses the launch command: {check.rejected} ({by}). The server would exit "
                           "at once with status 2.",
                           _fix_for_rejection(check.rejected, check.version.split(" ")[0]),
                           "extra_args" if extra else None))
    for o in check.overrides:
        said = "; ".join(f"`{b}`" for b in o.by)
        why = _how_read(o.flags[0], o.dest) if o.flags else ""
        out.append(Finding("error", "argv-override",
                           f"extra_args {said} sets {o.dest} to {_show(o.got)}, replacing {o.config_field} = "
                           f"{_show(o.typed)} from the config{why} ({by}). The server would run with "
                           f"{_show(o.got)} while the dashboard, preflight and alerts go by {_show(o.typed)}.",
                           f"Remove {said} from extra_args; to change {o.config_field}, set it in the config, where "
                           "preflight checks it.", "extra_args"))
    for cfg_field, want, got in check.typed_mismatch:
        out.append(Finding("error", "argv-typed-mismatch",
                           f"SGLang reads {cfg_field} as {_show(got)} from the launch command, but the config says "
                           f"{_show(want)} ({by}).",
                           "Set sglang_version to the serving environment's version so the launch builder writes "
                           "the flags that version takes.", cfg_field))
    for note in check.notes:
        out.append(Finding("info", "flag-deprecated", f"{note} ({by}).",
                           "Use the flag it names instead before a later version refuses it.", "extra_args"))
    problems = sum(1 for f in out if f.severity == "error")
    verdict = ("accepted, every typed field as configured" if not problems
               else f"{problems} problem(s) in the command, listed above")
    if check.checker == "sglang":
        out.append(Finding("info", "argv-checked",
                           f"Launch command {by} (in {check.python}): {verdict}.", "Nothing to do.", None))
    else:
        out.append(Finding("info", "argv-checked",
                           f"Launch command {by}: {verdict}. SGLang's own parser was not used: "
                           f"{check.fallback_reason}.",
                           "Point python at a serving environment with sglang (requirements-serve.txt) to have "
                           "SGLang's own parser check the command.", "python" if not cfg.simulate else None))
    return out
