"""Fuzz: mutated real benchmark reports through ``bench import``, in process.

    python perf/fuzz_bench_import.py [--cases 2200] [--seed 17] [--keep DIR]

Takes every report under tests/bench/fixtures (SGLang, vLLM and SpecForge
output, JSON and console), mutates each case with a seeded generator and runs
``backend.cli.main(["-w", WS, "bench", "import", FILE])`` on it, then ``bench
list`` and ``bench list --json`` over everything stored.  Mutations: a number
replaced by inf / -inf / nan / NaN / Infinity / 1e308 / -5 / a 30-digit integer
/ "1,234.5"; a JSON string given a control character; a line doubled, dropped,
cut short or quoted (``> ``, ``# ``, a markdown fence); a long run of ``=``,
spaces or ``-`` spliced in; bytes that are not UTF-8.

A case fails when ``main`` raises (a traceback) instead of returning an exit
status; the run prints the count by exception type with one example each, and
how many cases stored results, were refused or skipped lines.  It also checks
that nothing stored holds a non-finite or impossible figure.  Exit status 1
when any case failed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import math
import random
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.cli import main  # noqa: E402

FIXTURES = ROOT / "tests" / "bench" / "fixtures"
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
BAD_NUMBERS = ["inf", "-inf", "nan", "NaN", "Infinity", "-Infinity", "1e308", "-5", "123456789012345678901234567890",
               "1,234.5", "1e999", "0", "-1"]


def sources() -> list[tuple[str, str]]:
    out = []
    for p in sorted(FIXTURES.rglob("*")):
        if p.is_file() and p.suffix in (".jsonl", ".json", ".out", ".txt", ".md", ".csv", ".log"):
            out.append((p.name, p.read_text(encoding="utf-8", errors="replace")))
    return out


def mutate(text: str, rng: random.Random) -> bytes:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(12)
        if not lines:
            lines = [""]
        k = rng.randrange(len(lines))
        line = lines[k]
        if kind <= 3:
            nums = list(NUMBER.finditer(line))
            if nums:
                m = rng.choice(nums)
                lines[k] = line[:m.start()] + rng.choice(BAD_NUMBERS) + line[m.end():]
        elif kind == 4 and '"' in line:
            at = line.index('"') + 1
            lines[k] = line[:at] + rng.choice(["\x00", "\x01", "\x1f", "\t", "\x0b"]) + line[at:]
        elif kind == 5:
            lines.insert(k, line)
        elif kind == 6:
            del lines[k]
        elif kind == 7:
            lines[k] = line[: rng.randrange(len(line) + 1)]
        elif kind == 8:
            prefix = rng.choice(["> ", "# ", "// ", "```", ">> "])
            lines = [prefix + x for x in lines] if prefix != "```" else ["```"] + lines + ["```"]
        elif kind == 9:
            lines[k] = line + rng.choice(["=", " ", "-", "a", "("]) * rng.choice([100, 5000, 20000])
        elif kind == 10:
            lines.insert(k, "[" * rng.choice([10, 3000]))
        else:
            lines[k] = line.replace(":", ":" + " " * rng.randint(0, 50), 1)
    data = "\n".join(lines).encode("utf-8", errors="surrogatepass")
    if rng.random() < 0.02:
        data += b"\xff\xfe"
    return data


def stored_is_sane(ws: str) -> list[str]:
    """Figures in ``bench list --json`` that must not be there."""
    out = io.StringIO()
    main(["-w", ws, "bench", "list", "--json"], out, io.StringIO())
    bad = []
    for line in out.getvalue().splitlines():
        d = json.loads(line)
        for part in ("load", "results", "config"):
            for k, v in (d.get(part) or {}).items():
                vals = v.values() if isinstance(v, dict) else [v]
                for x in vals:
                    if k == "request_rate" and x == "inf":
                        continue
                    if isinstance(x, str) and x in ("inf", "-inf"):
                        bad.append(f"#{d.get('id')} {part}.{k} = {x}")
                    elif isinstance(x, (int, float)) and not isinstance(x, bool) and (
                            not math.isfinite(x) or x < 0 or abs(x) > 1e12):
                        bad.append(f"#{d.get('id')} {part}.{k} = {x}")
    return bad


def run(cases: int, seed: int, keep: str | None) -> int:
    rng = random.Random(seed)
    corpus = sources()
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="fuzz-bench-"))
    ws = str(work / "ws")
    assert main(["init", ws], io.StringIO(), io.StringIO()) == 0
    failures: dict[str, list[str]] = collections.defaultdict(list)
    outcome = collections.Counter()
    t0 = time.perf_counter()
    slowest = (0.0, "")
    for n in range(cases):
        name, text = corpus[n % len(corpus)]
        path = work / f"case{n:05d}-{name}"
        path.write_bytes(mutate(text, rng))
        err = io.StringIO()
        t = time.perf_counter()
        try:
            with contextlib.redirect_stderr(err):
                rc = main(["-w", ws, "bench", "import", str(path)], io.StringIO(), err)
            outcome["exit 0" if rc == 0 else "exit 1 (refused or lines skipped)"] += 1
        except BaseException as exc:  # a traceback is what this counts
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures[type(exc).__name__].append(f"{path}: {traceback.format_exc(limit=3)}")
        dt = time.perf_counter() - t
        if dt > slowest[0]:
            slowest = (dt, str(path))
    for argv in (["bench", "list"], ["bench", "list", "--json"]):
        try:
            main(["-w", ws, *argv], io.StringIO(), io.StringIO())
        except Exception as exc:
            failures[f"bench list: {type(exc).__name__}"].append(traceback.format_exc(limit=3))
    try:
        insane = stored_is_sane(ws)
    except Exception as exc:
        insane = [f"could not list: {exc!r}"]
    total = sum(len(v) for v in failures.values())
    print(f"{cases} cases from {len(corpus)} reports, seed {seed}, {time.perf_counter() - t0:.1f} s "
          f"(slowest case {slowest[0]:.2f} s: {slowest[1]})")
    for k, v in sorted(outcome.items()):
        print(f"  {k}: {v}")
    print(f"tracebacks: {total}")
    for kind, items in sorted(failures.items()):
        print(f"  {kind}: {len(items)}\n    e.g. {items[0].strip().splitlines()[-1]}\n    in {items[0].split(':')[0]}")
    print(f"impossible figures stored: {len(insane)}" + "".join(f"\n  {x}" for x in insane[:10]))
    return 1 if total or insane else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2200)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--keep", metavar="DIR", help="write the cases and the workspace here (kept)")
    a = ap.parse_args()
    sys.exit(run(a.cases, a.seed, a.keep))
