"""``bench``: benchmark results of the workspace.

    bench import FILE... [--server NAME] [--json]
    bench list [--server S] [--concurrency N] [--target T] [--source S] [--limit N] [--json]
    bench run SERVER [--concurrency N ...] [--num-prompts N] [--input-len N] [--output-len N] [--builtin|--sglang]
    bench sweep SERVER [--steps 3,5] [--topk 1,4] [--draft-tokens 4,8] [--baseline] ...  (cli_sweep.py)

``import`` recognises the format of each file (see :mod:`backend.bench.importers`),
stores every result in the workspace's state and prints one line per result
(``--json``: one JSON object per line, with ``"new": false`` for a result that
was already stored from the same file and line).  Lines that could not be read
are reported on stderr as ``FILE:LINE: field: why``; the rest is imported.
Exit status 1 when a file could not be imported or had such lines.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from typing import TextIO

from backend.bench.importers import BenchImportError, import_file
from backend.cli.session import SOURCE, Session, actor
from state import audit
from specdeck_types.bench import BenchResult
from state.bench import BenchFilter, BenchStore


def _f(v: float | None, digits: int) -> str:
    if v is None:
        return "N/A"
    return "inf" if math.isinf(v) else f"{v:.{digits}f}"


def describe(r: BenchResult) -> str:
    """One line: where it came from, the configuration, the load, the figures."""
    cfg, load, res = r.config, r.load, r.results
    if r.is_baseline:
        spec = "no speculation"
    elif cfg.algorithm:
        parts = [cfg.algorithm]
        if cfg.draft_model:
            parts.append(cfg.draft_model)
        if cfg.num_draft_tokens:
            parts.append(f"{cfg.num_draft_tokens} draft tokens")
        spec = " ".join(parts)
    else:
        spec = "speculation not recorded"
    lens = f"{load.input_len or '?'}/{load.output_len or '?'} tok" if (load.input_len or load.output_len) else ""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at)) if r.started_at else ""
    acc = _f(r.results.accept_len, 2)
    if res.accept_len is None and res.accept_len_lifetime is not None:
        acc = f"{_f(res.accept_len_lifetime, 2)} (server lifetime)"
    fields = [
        f"#{r.id}" if r.id is not None else "",
        when,
        r.server or "",
        cfg.target_model or "",
        spec,
        f"concurrency {load.concurrency}" if load.concurrency is not None else "concurrency N/A",
        lens,
        f"{_f(res.output_tok_s, 1)} tok/s",
        f"accept_len {acc}",
        r.label or "",
    ]
    return " · ".join(x for x in fields if x)


def cmd_bench_import(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    store = BenchStore(s.store)
    failed = 0
    for name in args.files:
        try:
            parsed = import_file(name)
        except BenchImportError as exc:
            sys.stderr.write(f"error: {exc}\n")
            failed += 1
            continue
        for q in parsed.problems:
            sys.stderr.write(f"skipped: {q}\n")
        failed += bool(parsed.problems)
        for r in parsed.results:
            if args.server and not r.server:
                r = replace(r, server=args.server)
            ins = store.insert(r)
            if args.json:
                d = ins.result.to_dict()
                d.pop("raw", None)
                d["new"] = ins.new
                out.write(json.dumps(d, sort_keys=True) + "\n")
            else:
                where = f"{ins.result.source_file}:{ins.result.source_line}"
                state = "new" if ins.new else "already stored"
                out.write(f"{where}: {ins.result.format} ({state}) {describe(ins.result)}\n")
    if failed:
        sys.stderr.write(f"{failed} of {len(args.files)} file(s) could not be imported in full\n")
    return 1 if failed else 0


def cmd_bench_list(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    flt = BenchFilter(server=args.server, concurrency=args.concurrency, target_model=args.target,
                      source=args.source)
    results = BenchStore(s.store).list(flt, limit=args.limit)
    if args.json:
        for r in results:
            d = r.to_dict()
            d.pop("raw", None)
            out.write(json.dumps(d, sort_keys=True) + "\n")
        return 0
    if not results:
        out.write("no benchmark results" + (" match" if flt != BenchFilter() else "") +
                  "; import some with `bench import FILE`\n")
    for r in results:
        out.write(describe(r) + "\n")
    return 0


def cmd_bench_delete(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    store = BenchStore(s.store)
    found = {i: store.get(i) for i in args.ids}
    missing = [i for i, r in found.items() if r is None]
    if missing:
        sys.stderr.write(f"error: no benchmark result {', '.join(f'#{i}' for i in missing)}; "
                         "`bench list` shows the stored ones (nothing deleted)\n")
        return 1
    for i, r in found.items():
        store.delete(i)
        out.write(f"deleted #{i}: {describe(r)}\n")
    audit.record(s.store, actor(), SOURCE, "delete", "benchmarks", "deleted " + ", ".join(f"#{i}" for i in found))
    return 0


def _check_import(args: argparse.Namespace) -> str | None:
    return None if args.files else "bench import needs at least one FILE"


def _register_import(bs: argparse._SubParsersAction) -> None:
    a = bs.add_parser("import", help="store results from bench_serving, bench_one_batch_server, "
                                     "bench_speculative, SpecForge or CSV files")
    a.add_argument("files", nargs="*", metavar="FILE")
    a.add_argument("--server", metavar="NAME", help="the server the results are from, for files that do not say")
    a.add_argument("--json", action="store_true", help="one JSON object per result")
    a.set_defaults(func=cmd_bench_import, check=_check_import, acts=False)


def _register_list(bs: argparse._SubParsersAction) -> None:
    a = bs.add_parser("list", help="stored results, oldest first")
    a.add_argument("--server", metavar="S")
    a.add_argument("--concurrency", type=int, metavar="N")
    a.add_argument("--target", metavar="MODEL", help="target model")
    a.add_argument("--source", metavar="SRC", help="run, or import: (every import), or import:FORMAT")
    a.add_argument("--limit", type=int, metavar="N", help="only the newest N")
    a.add_argument("--json", action="store_true", help="one JSON object per result")
    a.set_defaults(func=cmd_bench_list, acts=False)


def _register_delete(bs: argparse._SubParsersAction) -> None:
    a = bs.add_parser("delete", help="delete stored results by id (a file can be imported again)")
    a.add_argument("ids", nargs="+", type=int, metavar="ID", help="ids as `bench list --json` shows them")
    a.set_defaults(func=cmd_bench_delete, acts=False)


def register(sub: argparse._SubParsersAction) -> None:
    from backend.bench.cli_run import register_run  # `bench run`: see that module
    from backend.bench.cli_sweep import register_sweep  # `bench sweep`: see that module

    bench = sub.add_parser("bench", help="benchmark results: import, list, delete, run, sweep")
    bs = bench.add_subparsers(dest="action", required=True, metavar="ACTION")
    _register_import(bs)
    _register_list(bs)
    _register_delete(bs)
    register_run(bs)
    register_sweep(bs)
