"""Parse an SGLang server log into JSON lines.

    python -m backend.sglang.parselog LOGFILE [--kinds decode,prefill,phase,fatal] [--version 0.5.4]

Prints one JSON object per parsed record on stdout and a summary on stderr:
the counts, then every rejected line as ``FILE:LINE: unparsed: REASON`` (a batch
line whose label or values are not what SGLang prints, a timestamp that cannot
be read, a line longer than 64 KiB).  Bad lines never stop the run: exit status
0 whatever the content, 2 only when the file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import deque

from backend.sglang.ingest import MAX_LINE, LogIngester
from backend.sglang.version import capabilities

KINDS = ("decode", "prefill", "phase", "fatal")


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None  # keep the output standard JSON
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m backend.sglang.parselog", description=__doc__.split("\n")[1])
    ap.add_argument("logfile")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS))
    ap.add_argument("--version", default=None, help="sglang version that wrote the log (for accept rate meaning)")
    args = ap.parse_args(argv)
    kinds = {k.strip() for k in args.kinds.split(",") if k.strip()}
    bad = kinds - set(KINDS)
    if bad:
        ap.error(f"--kinds: unknown kind(s) {', '.join(sorted(bad))}")
    try:
        with open(args.logfile, "rb"):
            pass
    except OSError as exc:
        print(f"{args.logfile}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    ing = LogIngester(args.logfile, caps=capabilities(args.version) if args.version else None, max_points=1)
    ing.unparsed = deque()  # every rejected line, not only the latest ones the dashboard keeps
    out = sys.stdout
    dumps = json.dumps

    def emit(rec) -> None:
        if rec.kind in kinds:
            out.write(dumps(_clean(rec.to_dict()), default=str))
            out.write("\n")

    ing.add_listener(emit)
    while ing.poll(max_bytes=64 * 1024 * 1024):
        pass
    ing.flush()
    st = ing.stats
    cut = f" ({st.cut_lines} cut: longer than {MAX_LINE // 1024} KiB)" if st.cut_lines else ""
    print(f"{args.logfile}: {st.lines} lines, {st.decode_lines} decode, {st.prefill_lines} prefill, "
          f"{st.http_lines} HTTP access, {st.event_lines} startup/failure events, "
          f"{st.unparsed_lines} unparsed line(s){cut}", file=sys.stderr)
    for u in ing.unparsed:
        print(f"{args.logfile}:{u.line_no}: unparsed: {u.reason}", file=sys.stderr)
    if ing.rate_seen:
        print(f"accept rate meaning: {ing.accept_rate_description}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
