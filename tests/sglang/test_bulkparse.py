"""The vectorised (polars) path gives the same values as the per-line reference parser."""

from __future__ import annotations

import random

import pytest

from backend.sglang import bulkparse
from backend.sglang.ingest import LogIngester
from backend.sglang.logparse import BadBatchLine, _EVENT_RE, parse_line
from tests.sglang.test_logparse import DECODE_CASES, PREFILL_CASES

pytestmark = pytest.mark.skipif(not bulkparse.AVAILABLE, reason="polars is not installed")

DECODE_SERIES = ("ts", "accept_len", "accept_rate", "gen_throughput", "running_req", "queue_req", "token_usage",
                 "graph")
PREFILL_SERIES = ("ts", "new_seq", "new_token", "cached_token", "input_throughput", "running_req", "queue_req",
                  "token_usage")

PREFIXES = [
    "[{ts}] ", "[{ts} TP0] ", "[{ts}.{ms} DP3 TP3 EP3] ", "[{ts}.000 TP1] ", "[{ts} DP0 TP0] ",
    "[{ts} PP1 ATTN_CP1 MOE_DP2 TP3] ", "(SGLangEngine pid=41820) [{ts} TP0] ",
    "(SGLangEngine pid=7, ip=10.0.0.7) [{ts}.{ms} DP1 TP1] ", "{ts} INFO 151972 [scheduler_metrics_mixin.py:287] ",
    "{ts}.{ms} INFO 9 [scheduler.py:1] ", "{ts},5 WARNING 9 [scheduler.py:1] ",
]


def _body(line: str) -> str:
    """The fixture line from its label on (its own prefix removed)."""
    p = line.find("Decode batch")
    return line[p:] if p >= 0 else line[line.find("Prefill batch"):]


def _shuffle_values(body: str, rng: random.Random) -> str:
    """The same keys with other values of the same kind (ints, decimals with leading zeros, True/False),
    sometimes in another order."""
    out = []
    for tok in body.rstrip(", ").split(", "):
        k, sep, v = tok.rpartition(": ")
        if not sep:
            out.append(tok)
            continue
        if v in ("True", "False"):
            v = rng.choice(("True", "False"))
        elif k == "accept len":  # at least 1 (it counts the bonus token)
            v = f"{rng.choice(('', '0', '00'))}{rng.randrange(1, 9)}.{rng.randrange(10 ** 6):0{rng.randrange(1, 7)}d}"
        elif k == "accept rate":  # between 0 and 1
            v = rng.choice(("1.00", "1", f"0.{rng.randrange(10 ** 6):0{rng.randrange(1, 7)}d}"))
        elif v.replace(".", "", 1).isdigit() and "." in v:
            v = f"{rng.choice(('', '0', '00'))}{rng.randrange(10 ** rng.randrange(1, 7))}.{rng.randrange(10 ** 6):0{rng.randrange(1, 7)}d}"
        elif v.isdigit():
            v = str(rng.choice((0, 1, rng.randrange(10 ** 6), rng.randrange(10 ** 17), 10 ** 18 - 1)))
            if rng.random() < 0.1 and len(v) < 18:  # a leading zero, still at most 18 digits
                v = "0" + v
        elif v.endswith("%"):
            v = f"{rng.random() * 100:.2f}%"
        out.append(f"{k}{sep}{v}")
    head, pairs = out[0], out[1:]  # the label stays first
    if rng.random() < 0.4:
        rng.shuffle(pairs)  # field order never matters
    return ", ".join([head, *pairs])


def _variants(rng: random.Random, n_each: int = 12) -> list[str]:
    lines = []
    for case, _ in DECODE_CASES + PREFILL_CASES:
        body = _body(case)
        for _ in range(n_each):
            ts = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} {rng.randrange(24):02d}:" \
                 f"{rng.randrange(60):02d}:{rng.randrange(60):02d}"
            prefix = rng.choice(PREFIXES).format(ts=ts, ms=f"{rng.randrange(1000):03d}")
            b = _shuffle_values(body, rng)
            tail = rng.choice(("", ", ", ","))
            lines.append(prefix + b.rstrip(", ") + tail)
    rng.shuffle(lines)
    return lines


def _check_columns(piece, lines: list[str]) -> int:
    """Assert every accepted row equals parse_line; return how many rows were compared."""
    n = 0
    for cols, names, kind in ((piece.decode, DECODE_SERIES, "decode"), (piece.prefill, PREFILL_SERIES, "prefill")):
        data = {c: cols.column(c) for c in ("line", "rank", *names)}
        for row in range(len(cols)):
            line = lines[data["line"][row]]
            ref = parse_line(line)
            assert ref is not None and ref.kind == kind, line
            for c in names:
                assert data[c][row] == getattr(ref, c), (c, data[c][row], getattr(ref, c), line)
                assert type(data[c][row]) is type(getattr(ref, c)), (c, line)
            assert data["rank"][row] == ref.rank_label, line
            n += 1
    return n


def test_every_fixture_format_gives_the_reference_values():
    lines = [case for case, _ in DECODE_CASES + PREFILL_CASES]
    shapes = bulkparse.Shapes()
    piece = bulkparse.parse_piece(("\n".join(lines) + "\n").encode(), shapes, _EVENT_RE.pattern)
    assert piece is not None and piece.n_lines == len(lines)
    compared = _check_columns(piece, lines)
    fallback = {i for i, _ in piece.fallback}
    # every format of the reference is read by the vectorised path, except a Ray actor name with a '.'
    # or similar, which this fixture set does not have
    assert compared == len(lines) and not fallback
    assert len(piece.decode) == len(DECODE_CASES) and len(piece.prefill) == len(PREFILL_CASES)


def test_random_variants_of_every_format_give_the_reference_values():
    rng = random.Random(7)
    lines = _variants(rng)
    shapes = bulkparse.Shapes()
    piece = bulkparse.parse_piece(("\n".join(lines) + "\n").encode(), shapes, _EVENT_RE.pattern)
    assert piece is not None
    compared = _check_columns(piece, lines)
    # what the fast path did not take, the reference reads as a record (none of these lines is bad)
    for i, line in piece.fallback:
        assert parse_line(line) is not None
    assert compared + len(piece.fallback) == len(lines)
    # shuffled field orders make many shapes; up to bulkparse.MAX_SHAPES are learned, the rest go line by line
    assert compared > len(lines) // 2 and len(shapes.keys) == bulkparse.MAX_SHAPES


def test_bad_values_in_a_known_shape_are_left_to_the_reference():
    good = "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, " \
           "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0"
    bad = [
        good.replace("#retracted-req: 0", "#retracted-req: x"),  # a field outside the series
        good.replace("cuda graph: True", "cuda graph: Maybe"),
        good.replace("token usage: 0.29", "token usage: 0.2.9"),
        good.replace("#running-req: 5", "#running-req: -"),
        good.replace("#queue-req: 0", "#queue-req: "),
        good.replace("token usage: 0.29", "token usage: ."),
        good.replace("Decode batch,", "Decode batch [x],"),
        good.replace("#token: 20800", "#token: 20800, #token: 3"),  # a repeated field
    ]
    lines = [good] * 20 + bad + [good.replace("[2026", "(a.b pid=1) [2026")]
    piece = bulkparse.parse_piece(("\n".join(lines) + "\n").encode(), bulkparse.Shapes(), _EVENT_RE.pattern)
    assert piece is not None
    assert len(piece.decode) == 20
    assert [i for i, _ in piece.fallback] == list(range(20, len(lines)))
    for _, line in piece.fallback[:-2]:
        with pytest.raises(BadBatchLine):
            parse_line(line)


def test_pieces_with_other_line_breaks_are_refused():
    shapes = bulkparse.Shapes()
    for text in ("a\rb\n", "a\x0bb\n", "a\x1fb\n", "a\u2028b\n", "\ufeffa\n"):
        assert bulkparse.parse_piece(text.encode(), shapes, _EVENT_RE.pattern) is None
    assert bulkparse.parse_piece("plain line\n".encode(), shapes, _EVENT_RE.pattern) is not None


def _mixed_log(rng: random.Random) -> str:
    access = '[2026-04-08 14:05:00] INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK'
    out = [
        "===== specdeck: srv run 20260408T140000-aaaa starting at 2026-04-08 14:00:00: python -m x",
        "[2026-04-08 14:00:01] server_args=ServerArgs(model_path='/m')",
        "[2026-04-08 14:00:02 TP0] Load weight begin. avail mem=78.12 GB",
        "[2026-04-08 14:00:30 TP0] KV Cache is allocated. #tokens: 1000, K size: 1 GB, V size: 1 GB",
        '[2026-04-08 14:00:41] INFO:     127.0.0.1:1 - "GET /get_model_info HTTP/1.1" 200 OK',
        "[2026-04-08 14:00:42] The server is fired up and ready to roll!",
        "",
        "[2026-04-08 14:00:43] Décodé: a line with non-ASCII text",
        "a batch of something unrelated",
        "[2026-04-08 14:00:44] the Decode batchsize is large",
    ]
    variants = _variants(rng, n_each=30)
    fatal = [
        "[2026-04-08 14:10:33 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 300, in __init__',
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB",
        "[2026-04-08 14:10:33 TP0] Cache flushed successfully!",
        "   not part of the traceback any more",
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    ]
    bad = ["[2026-04-08 14:05:02] Decode batch, #running-req: x", "[2026-04-08 14:05:03] Prefill batch, ",
           "[2026-04-08 14:05:04] Decode batch [x], #running-req: 3"]
    for i, line in enumerate(variants):
        out.append(line)
        if i % 3 == 0:
            out.append(access)
        if i % 97 == 5:
            out.append(bad[(i // 97) % len(bad)])
        if i == len(variants) // 2:
            out.extend(fatal)
        if i % 211 == 0:
            out.append("[2026-04-08 14:05:09 TP0] Decode out of memory. Try to lower your batch size.")
    return "\n".join(out) + "\n"


def _ingest(path, bulk: bool, chunk: int) -> LogIngester:
    ing = LogIngester(path, max_points=500, chunk_bytes=chunk, bulk=bulk)
    ing.bulk_min_bytes = 0
    ing.poll()
    ing.flush()
    return ing


def _same(a: LogIngester, b: LogIngester) -> None:
    assert a.stats == b.stats
    for name in ("decode", "prefill"):
        x, y = getattr(a, name).as_lists(), getattr(b, name).as_lists()
        assert x.keys() == y.keys()
        for c in x:
            assert x[c] == y[c], (name, c)
    assert list(a.unparsed) == list(b.unparsed)
    assert a.startup == b.startup
    assert list(a.tail) == list(b.tail)
    assert a.last_decode == b.last_decode and a.last_prefill == b.last_prefill
    assert a.ranks_seen == b.ranks_seen
    assert (a.spec_seen, a.rate_seen) == (b.spec_seen, b.rate_seen)


@pytest.mark.parametrize("chunk", [4096, 64 * 1024, 8 * 1024 * 1024])
def test_ingester_bulk_and_per_line_paths_agree(tmp_path, chunk):
    log = tmp_path / "srv.log"
    log.write_text(_mixed_log(random.Random(11)), encoding="utf-8")
    fast = _ingest(log, True, chunk)
    ref = _ingest(log, False, chunk)
    assert fast.bulk_pieces > 0 and ref.bulk_pieces == 0
    _same(fast, ref)
    assert fast.stats.unparsed_lines > 0 and fast.stats.decode_lines > 500
    assert fast.startup.fatal is not None and fast.startup.fatal.code == "cuda_graph_capture_failed"
    assert len(fast.decode) == 500  # bounded


def test_ingester_appends_through_both_paths_agree(tmp_path):
    """Large reads go through the vectorised path, small appends through the per-line one."""
    log = tmp_path / "srv.log"
    text = _mixed_log(random.Random(3))
    cut = len(text) // 2
    cut = text.rfind("\n", 0, cut) + 1 + 40  # a partial line left for the next read
    log.write_text(text[:cut], encoding="utf-8")
    fast = LogIngester(log, max_points=300, chunk_bytes=16 * 1024)
    fast.bulk_min_bytes = 1024
    ref = LogIngester(log, max_points=300, chunk_bytes=16 * 1024, bulk=False)
    fast.poll(), ref.poll()
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(text[cut:cut + 500])
    fast.poll(), ref.poll()
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(text[cut + 500:])
    fast.poll(), ref.poll()
    assert fast.bulk_pieces > 0
    _same(fast, ref)
