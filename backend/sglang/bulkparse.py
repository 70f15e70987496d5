"""Vectorised parsing of large pieces of a server log into typed columns (polars).

The per-line parser in :mod:`backend.sglang.logparse` is the reference; this
module reads many megabytes at once and must give the same values.  It only
accepts what it can prove the reference reads the same way, and hands every
other line back to the caller for the reference parser:

* a piece is split into lines by polars' CSV reader (one column, no quoting);
  pieces holding characters that Python's ``str.splitlines`` treats as line
  breaks (``\\r``, ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, NEL, LS, PS), NUL,
  the reader's separator or a leading byte-order mark are refused (the caller
  falls back);
* a batch line is accepted when the whole line matches one regular expression
  built from the *shapes* seen so far: the prefix in its bracket or dictConfig
  form, the ``Decode``/``Prefill batch`` label, and one known sequence of keys
  with values of the key's type in the per-line parser's own grammar (ASCII
  digits, no sign, at most 18 digits for a count, True/False); accepted rows
  whose values are out of range (``logparse.LIMITS``) are handed back.  Shapes are
  learned from lines the reference parser read; a shape is only learned when
  the per-key extraction below cannot be misled by it (no repeated field, no
  key that ends like a known key);
* from accepted lines each series field is taken with its own regular
  expression (``, accept len: ([^,]+)``), so field order and optional fields
  never matter, and converted column-wise.  The timestamp's second and the
  rank tags repeat, so they are converted once per distinct value with the
  reference's own functions (mktime, the rank-tag reader).

The costly expressions run on row slices side by side, and the ingester
parses two pieces at once (polars releases the GIL), so both cores work.

Lines containing "batch" that are not accepted come back as ``fallback``;
every other line is classified (access log, startup/failure candidates, plain
prefixed lines) so that the caller runs Python only where the reference would
act.
"""

from __future__ import annotations

import importlib.util
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from backend.sglang import logparse as lp


class _Polars:
    """polars, imported at its first use rather than with this module: every command-line session and
    supervisor opens the server fleet, which imports the ingester, and most never read a log in bulk;
    importing polars is about a third of such a command's start-up."""

    def __getattr__(self, name: str) -> Any:
        import polars

        global pl
        pl = polars
        return getattr(polars, name)


# optional: without polars the ingester uses the reference parser throughout
AVAILABLE = importlib.util.find_spec("polars") is not None
pl: Any = _Polars() if AVAILABLE else None

# -- grammar -----------------------------------------------------------------------

_C = r"[!-+\--9;-~]"  # printable ASCII except space, ',' and ':'
_VALUE = _C + "+"
_INT = lp._TEXT["int"]  # the per-line parser's own grammar: ASCII digits, no sign, bounded length
_FLOAT = lp._TEXT["float"]
_BOOL = r"(?:True|False)"
_PCT = lp._TEXT["pct"]
_KEY_RE = re.compile(r"[!-+\--9;-~](?:[ !-+\--9;-~]*[!-+\--9;-~])?")
_DS = r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
# "[ts(.mmm)( TAGn)*] " after an optional Ray actor prefix; or dictConfig "ts(.f) LEVEL pid [file:line] "
_F1 = (r"(?:\([A-Za-z0-9_-]+ pid=[0-9]+(?:, ip=[0-9.]+)?\) )?\[(" + _DS + r")(?:\.([0-9]{3}))?"
       r"((?: [A-Z_]+[0-9]+)*)\] ")
_F2 = "(" + _DS + r")(?:[.,]([0-9]{1,6}))? [A-Z]+ [0-9]+ \[[A-Za-z0-9_.]+:[0-9]+\] "
_HEAD = "^(?:" + _F1 + "|" + _F2 + ")(Decode|Prefill) batch"
_HEAD_NC = re.sub(r"\((?!\?)", "(?:", _HEAD.replace(r"\(", "\x00")).replace("\x00", r"\(")
_LABEL_TAIL = r"(?: \[[0-9]{1,18}\])?[.,] "

_TYPE_PATTERN = {int: _INT, float: _FLOAT, lp._pct: _PCT}
_DECODE_FIELDS = ("accept_len", "accept_rate", "gen_throughput", "running_req", "queue_req")
_PREFILL_FIELDS = ("new_seq", "new_token", "cached_token", "input_throughput", "running_req", "queue_req")
_KEY_OF = {name: k for k, (name, _) in lp._KEYS.items() if name != "graph"}
_GRAPH_KEYS = tuple(sorted(lp._GRAPH_KEYS))

SPLIT_PARTS = 0  # row slices for one costly expression; 0: one per polars thread
MAX_SHAPES = 64
LEARN_MIN_LINES = 8  # learn shapes in bulk once this many lines of a piece were not accepted
_SEPARATOR = "\x1f"
_REFUSE_BYTES = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\x1f", b"\x00")

# access-log, startup and failure classification of the other lines
_SURELY_PREFIXED = r"^(?:\[[0-9]{4}.|[0-9]{4}-.{8}:.{6}|\([ -~]{0,58} pid=)"


def _rx(text: str) -> str:
    """A literal for the regex engine polars uses (every non-alphanumeric character escaped by code)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == " ") else "\\x{%x}" % ord(c) for c in text)


def _shape_of(line: str) -> tuple | None:
    """The key sequence the reference parser reads from ``line``, if the fast path may learn it."""
    p = line.find("Decode batch")
    n = 12
    if p < 0:
        p = line.find("Prefill batch")
        n = 13
        if p < 0:
            return None
    try:
        lab = lp._split_label(line, p, n)
    except lp.BadBatchLine:
        return None
    if lab is None:
        return None
    parts = line[lab[1]:].strip().rstrip(",").replace(": ", ", ").split(", ")
    if len(parts) & 1 or len(parts) > 128:
        return None
    keys = tuple(parts[0::2])
    names = []
    for k in keys:
        if not _KEY_RE.fullmatch(k) or "batch" in k:
            return None
        spec = lp._KEYS.get(k)
        names.append(spec[0] if spec else k)
        for known in lp._KEYS:
            if k != known and k.endswith(known) and k[:-len(known)].rstrip(" ").endswith((".", ",")):
                return None  # ".. token usage" would look like the known key to the extraction
    if len(set(names)) != len(names) or ("token usage" in keys and "full token usage" in keys):
        return None
    return keys


def _shape_pattern(keys: tuple) -> str:
    out = []
    for k in keys:
        spec = lp._KEYS.get(k)
        if spec is None:
            t = _VALUE
        elif spec[0] == "graph":
            t = _BOOL
        else:
            t = _TYPE_PATTERN[spec[1]]
        out.append(_rx(k) + ": " + t)
    return ", ".join(out)


class Shapes:
    """The key sequences the fast path accepts, and the one regular expression that checks a line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.keys: list[tuple] = []
        self._known: set[tuple] = set()
        self.pattern: str | None = None

    def add(self, keys: tuple) -> bool:
        with self._lock:
            if keys in self._known or len(self.keys) >= MAX_SHAPES:
                return False
            self._known.add(keys)
            self.keys.append(keys)
            body = "|".join("(?:" + _shape_pattern(k) + ")" for k in self.keys)
            self.pattern = _HEAD_NC + _LABEL_TAIL + "(?:" + body + ")(?:, ?)?$"
            return True

    def learn(self, lines: list[str]) -> int:
        n = 0
        for line in lines:
            keys = _shape_of(line)
            if keys is not None and self.add(keys):
                n += 1
        return n


# -- results -----------------------------------------------------------------------

@dataclass
class BatchColumns:
    """Typed columns of the Decode or Prefill batch lines of a piece, in line order.

    ``frame`` has ``line`` (index in the piece), ``ts`` (epoch seconds, None
    when the timestamp does not convert), ``rank`` (rank tags as a label, ""
    when none), and one column per series field.  Whole records are built on
    demand from the line with the reference parser (:meth:`Piece.record`).
    """

    kind: str
    frame: Any  # polars.DataFrame

    def __len__(self) -> int:
        return self.frame.height

    def column(self, name: str) -> list:
        return self.frame.get_column(name).to_list()

    def any_not_null(self, name: str) -> bool:
        return self.frame.height > 0 and self.frame.get_column(name).null_count() < self.frame.height

    def ranks(self) -> set[str]:
        return set(self.frame.get_column("rank").unique().to_list()) if self.frame.height else set()


@dataclass
class Piece:
    n_lines: int
    lines: Any  # polars.Series of the piece's lines
    decode: BatchColumns
    prefill: BatchColumns
    fallback: list[tuple[int, str]]  # lines with "batch" that the reference parser must read
    others: list[tuple[int, str]]  # lines the reference must look at: startup, failures, warmup probe, unprefixed
    prefixed_skipped: list[int]  # plain prefixed lines (they only end a traceback capture)
    http_skipped: int  # access-log lines that need nothing but counting
    tail: list[str] = field(default_factory=list)

    def record(self, i: int):
        """The reference parser's record for line ``i`` of the piece."""
        return lp.parse_batch(self.lines[i])


# -- conversion helpers ----------------------------------------------------------------

_epoch_memo: dict[str, float | None] = {}


_minute_memo: dict[str, float | None] = {}


def _minute_start(m: str) -> float | None:
    """mktime of 'YYYY-MM-DD HH:MM' second 0, when the whole minute maps one to one (no clock change
    inside it: second 59 is 59 s later), else None."""
    v = _minute_memo.get(m, -1.0)
    if v != -1.0:
        return v
    y, mo, d, h, mi = int(m[:4]), int(m[5:7]), int(m[8:10]), int(m[11:13]), int(m[14:16])
    v = None
    if 1900 <= y <= 9999 and 1 <= mo <= 12 and 1 <= d <= 28 and h <= 23 and mi <= 59:
        try:
            a = time.mktime((y, mo, d, h, mi, 0, 0, 1, -1))
            b = time.mktime((y, mo, d, h, mi, 59, 0, 1, -1))
            v = a if b - a == 59.0 else None
        except (OverflowError, ValueError):
            v = None
    if len(_minute_memo) > 65536:
        _minute_memo.clear()
    _minute_memo[m] = v
    return v


def _epoch_fast(v: str) -> float | None:
    """``logparse._epoch`` for 'YYYY-MM-DD HH:MM:SS': mktime on the same fields with isdst -1, taken
    from the minute's start when the minute has no clock change; anything else goes to the reference."""
    sec = int(v[17:19])
    if sec <= 59:
        base = _minute_start(v[:16])
        if base is not None:
            return base + sec
    return lp._epoch(v[:10], v[11:])


def _epochs(values: list[str]) -> dict[str, float | None]:
    out = {}
    for v in values:
        if v is None:
            continue
        e = _epoch_memo.get(v, -1.0)
        if e == -1.0:
            e = _epoch_fast(v)
            if len(_epoch_memo) > 65536:
                _epoch_memo.clear()
            _epoch_memo[v] = e
        out[v] = e
    return out


def _rank_labels(values: list[str]) -> dict[str, str]:
    out = {}
    for v in values:
        if v is None:
            continue
        ranks = lp._ranks_of(v) if v.strip() else ()
        out[v] = lp.rank_label(ranks) if ranks else ""
    return out


_POW10 = {1: 10.0, 2: 100.0, 3: 1000.0, 4: 10000.0, 5: 100000.0, 6: 1000000.0}


_INTS = frozenset(("running_req", "queue_req", "new_seq", "new_token", "cached_token"))


def _par_with_columns(frame, exprs: list) -> Any:
    """``frame.with_columns(exprs)`` on row slices evaluated side by side (one per polars thread).

    A single string expression runs on one thread; slicing the rows lets a
    costly one (the shape check) use every core.
    """
    parts = min(SPLIT_PARTS or pl.thread_pool_size(), max(1, frame.height // 20000))
    if parts <= 1:
        return frame.with_columns(exprs)
    step = -(-frame.height // parts)
    lazy = [frame.slice(k * step, step).lazy().with_columns(exprs) for k in range(parts)]
    return pl.concat(pl.collect_all(lazy))


def _value(key: str) -> Any:
    """The text after ", KEY: " up to the next comma (null when the key is absent).

    "l2" is the accepted line with the label's ". " turned into ", ", so every
    key follows ", "; keys hold no comma and values no space, and the prefix
    has no ", " before a key, so this finds the key itself.
    """
    return pl.col("l2").str.extract(r", " + key + r": ([^,]+)", 1)


def _typed(frame, kind: str) -> Any:
    """Series columns of accepted lines of one kind."""
    names = _DECODE_FIELDS if kind == "decode" else _PREFILL_FIELDS
    exprs = [_value(_rx(_KEY_OF[n])).cast(pl.Int64 if n in _INTS else pl.Float64).alias(n) for n in names]
    # a shape never has both (see _shape_of): whichever is there
    exprs.append(_value("(?:full )?token usage").cast(pl.Float64).alias("token_usage"))
    if kind == "decode":
        graph = _value("(?:" + "|".join(_rx(k) for k in _GRAPH_KEYS) + ")")
        exprs.append((graph == "True").alias("graph"))  # null stays null
    return _par_with_columns(frame.select("i", "ts", "rank", "l2"), exprs).drop("l2")


def _prefix_columns(frame) -> Any:
    """ts and rank label, converted once per distinct second and per distinct rank-tag text."""
    ds = pl.coalesce("ds", "ds2")
    uniq_ds = frame.select(ds.unique()).to_series().to_list()
    uniq_tags = frame.get_column("tags").unique().to_list()
    emap = _epochs(uniq_ds)
    rmap = _rank_labels(uniq_tags)
    frac = (pl.when(pl.col("ms").is_not_null()).then(pl.col("ms").cast(pl.Float64) / 1000.0)
            .when(pl.col("frac2").is_not_null())
            .then(pl.col("frac2").cast(pl.Float64)
                  / pl.col("frac2").str.len_bytes().replace_strict(_POW10, return_dtype=pl.Float64))
            .otherwise(None))
    epoch = ds.replace_strict(emap, default=None, return_dtype=pl.Float64) if emap else pl.lit(None, pl.Float64)
    ts = pl.when(frac.is_null()).then(epoch).otherwise(epoch + frac).alias("ts")
    rank = (pl.col("tags").replace_strict(rmap, default="", return_dtype=pl.String).fill_null("")
            if rmap else pl.lit("")).alias("rank")
    return frame.with_columns(ts, rank)


def _lines_of(data: bytes):
    """The lines of a piece as a polars Series, or None when the reader might split them otherwise."""
    if data.startswith(b"\xef\xbb\xbf"):
        return None
    if not data.isascii():
        text = data.decode("utf-8", "replace")
        if "\x85" in text or "\u2028" in text or "\u2029" in text:
            return None
        data = text.encode("utf-8")
    for b in _REFUSE_BYTES:
        if data.find(b) >= 0:
            return None
    if not data.endswith(b"\n"):
        data += b"\n"
    s = pl.read_csv(data, has_header=False, separator=_SEPARATOR, quote_char=None, schema={"l": pl.String},
                    infer_schema=False).get_column("l").fill_null("")
    return s


def parse_piece(data: bytes, shapes: Shapes, event_pattern: str) -> Piece | None:
    """Classify and convert a piece of complete lines; None when it must go through the reference parser."""
    if pl is None:
        return None
    lines = _lines_of(data)
    if lines is None:
        return None
    n = len(lines)
    df = pl.DataFrame({"l": lines}).with_row_index("i")
    ln = pl.col("l")
    df = df.with_columns(ln.str.contains("batch", literal=True).alias("cand"),
                         ln.str.contains("HTTP/1.", literal=True).alias("http"))
    cand = df.filter(pl.col("cand")).select("i", "l")
    rest = df.filter(~pl.col("cand")).select("i", "l", "http")

    def check(frame):
        """(accepted lines with their prefix groups, the rest) of candidate lines."""
        pattern = shapes.pattern
        if pattern is None or frame.height == 0:
            return frame.head(0), frame
        g = _par_with_columns(frame, [
            ln.str.contains(pattern).alias("ok"),
            ln.str.replace("batch. ", "batch, ", literal=True).alias("l2"),
            ln.str.extract_groups(_HEAD).struct.rename_fields(["ds", "ms", "tags", "ds2", "frac2", "kind"])
            .alias("g"),
        ])
        ok = pl.col("ok")
        return g.filter(ok).drop("ok").unnest("g"), g.filter(~ok).select("i", "l")

    good, miss = check(cand)
    if miss.height >= LEARN_MIN_LINES and len(shapes.keys) < MAX_SHAPES:
        # one line per distinct key sequence, read by the reference to learn the shape
        sig = (ln.str.extract(r"batch(?: \[[0-9]+\])?[.,](.*)$", 1)
               .str.replace_all(r": [^,]*", ":").alias("sig"))
        reps = (miss.with_columns(sig).unique("sig", keep="first", maintain_order=True)  # file order: deterministic
                .head(4 * MAX_SHAPES).get_column("l").to_list())
        if shapes.learn(reps):
            more, miss = check(miss)
            good = pl.concat([good, more]).sort("i") if good.height else more

    if good.height:
        # a Prefill label with "Decode batch" later in the line is read from there by the reference
        odd = (pl.col("kind") == "Prefill") & ln.str.contains("Decode batch", literal=True)
        if good.select(odd.any()).item():
            miss = pl.concat([miss, good.filter(odd).select("i", "l")]).sort("i")
            good = good.filter(~odd)
        good = _prefix_columns(good.drop("l"))
    keep_dec = ["i", "ts", *_DECODE_FIELDS, "token_usage", "graph", "rank"]
    keep_pre = ["i", "ts", *_PREFILL_FIELDS, "token_usage", "rank"]
    if good.height:
        dec = _typed(good.filter(pl.col("kind") == "Decode"), "decode")
        pre = _typed(good.filter(pl.col("kind") == "Prefill"), "prefill").select(keep_pre)
        # values out of their range (accept len below 1, accept rate above 1): the reference rejects
        # each such line with its reason
        out = pl.lit(False)
        for name, (low, high) in lp.LIMITS.items():
            out = out | (pl.col(name) < low).fill_null(False) | (pl.col(name) > high).fill_null(False)
        flagged = dec.filter(out).get_column("i")
        if flagged.len():
            back = pl.DataFrame({"i": flagged, "l": lines.gather(flagged)})
            miss = pl.concat([miss, back]).sort("i")
            dec = dec.filter(~out)
        dec = dec.select(keep_dec)
    else:
        dec = records_frame("decode", []).rename({"line": "i"})
        pre = records_frame("prefill", []).rename({"line": "i"})
    dec, pre = dec.rename({"i": "line"}), pre.rename({"i": "line"})

    # the other lines: count the access log, hand back what the reference would act on
    plain = rest.filter(~pl.col("http")).select(
        "i", "l", ln.str.contains(event_pattern).alias("event"), ln.str.contains(_SURELY_PREFIXED).alias("prefixed"))
    probes = rest.filter(pl.col("http") & ln.str.contains("model_info HTTP", literal=True)).select("i", "l")
    http_skipped = rest.filter(pl.col("http")).height - probes.height
    sel = pl.concat([probes, plain.filter(pl.col("event") | ~pl.col("prefixed")).select("i", "l")]).sort("i")
    others = list(zip(sel.get_column("i").to_list(), sel.get_column("l").to_list()))
    skipped = plain.filter(pl.col("prefixed") & ~pl.col("event")).get_column("i").to_list()
    fallback = list(zip(miss.get_column("i").to_list(), miss.get_column("l").to_list()))
    return Piece(n, lines, BatchColumns("decode", dec), BatchColumns("prefill", pre), fallback, others,
                 skipped, http_skipped)


def records_frame(kind: str, items: list[tuple[int, Any]]):
    """A columns frame (as in :class:`BatchColumns`) from reference records: [(line index, record)]."""
    names = _DECODE_FIELDS if kind == "decode" else _PREFILL_FIELDS
    cols: dict[str, list] = {"line": [i for i, _ in items],
                             "ts": [r.ts for _, r in items]}
    for nme in names:
        cols[nme] = [getattr(r, nme) for _, r in items]
    cols["token_usage"] = [r.token_usage for _, r in items]
    schema = {"line": pl.UInt32, "ts": pl.Float64, "token_usage": pl.Float64, "rank": pl.String}
    for nme in names:
        schema[nme] = pl.Int64 if nme in ("running_req", "queue_req", "new_seq", "new_token", "cached_token") \
            else pl.Float64
    if kind == "decode":
        cols["graph"] = [r.graph for _, r in items]
        schema["graph"] = pl.Boolean
    cols["rank"] = [lp.rank_label(r.ranks) if r.ranks else "" for _, r in items]
    return pl.DataFrame(cols, schema={k: schema[k] for k in cols})
