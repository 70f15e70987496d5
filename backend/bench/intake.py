"""Store benchmark files that arrive as bytes (uploaded or pasted on the
Benchmarks page) rather than as paths.

A file without a path is named by what the user called it and the start of
its SHA-256, ``nohup.out (uploaded, sha256 3f9c01a2b4d5)``: the name the
results carry as their source, the key that the store dedupes on with the
line.  The same bytes again are "already stored"; another file of the same
name is a file of its own.

The importer may say what the file does not: the server the results belong to,
and the speculation algorithm (``none`` for runs without speculation).  These
fill in only what the file left open: a server the file names is kept, an
algorithm it names is kept, and "none" is not applied to a result whose report
shows speculation (an accept length above 1); each such refusal is a note.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from backend.bench.importers import BenchImportError, parse_bytes
from backend.readcap import BENCH_FILE_MAX
from specdeck_types.bench import NO_SPECULATION, NO_SPECULATION_WORDS, UNNAMED_SPECULATION, BenchResult
from state.bench import BenchStore

MAX_BYTES = BENCH_FILE_MAX  # the same cap as a file imported by path (backend.readcap)


@dataclass
class FileOutcome:
    """What became of one file: results stored new or found already stored
    (by id), lines skipped (file:line: field: why), or why none of it was."""

    name: str  # the name the results carry as their source
    given: str = ""  # what the user called the file
    sha256: str = ""
    formats: list[str] = field(default_factory=list)
    new: list[int] = field(default_factory=list)
    existing: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.skipped


def _clean(name: str) -> str:
    return " ".join((name or "").split()) or "unnamed"


def source_name(name: str, data: bytes, how: str = "uploaded") -> str:
    return f"{_clean(name)} ({how}, sha256 {hashlib.sha256(data).hexdigest()[:12]})"


def algorithm_choice(text: str | None) -> str | None:
    """What the importer typed as the algorithm: None for nothing, ``NONE`` for a word meaning
    no speculation ("none", "baseline", "off"), else the name upper-cased (EAGLE3)."""
    t = (text or "").strip()
    if not t:
        return None
    if t.upper() in NO_SPECULATION_WORDS:
        return NO_SPECULATION
    if len(t) > 64 or not all(c.isalnum() or c in "_-. " for c in t):
        raise ValueError(f"algorithm {t[:64]!r}: a name like EAGLE3, or none for runs without speculation")
    return t.upper()


def fill_in(r: BenchResult, *, server: str | None = None, algorithm: str | None = None) -> tuple[BenchResult, str | None]:
    """``r`` with the server and algorithm the importer gave where its file did not say, and a note
    where the importer's word was not taken."""
    note = None
    if server and not r.server:
        r = replace(r, server=server)
    if algorithm:
        have = r.config.algorithm
        acc = r.accept_len
        where = f"{r.source_file}:{r.source_line}"
        if have is None:
            if algorithm == NO_SPECULATION and acc is not None and acc > 1:
                r = replace(r, config=replace(r.config, algorithm=UNNAMED_SPECULATION))
                note = (f"{where}: accept length {acc:.2f} shows speculation; stored as speculative, "
                        "not as a run without it")
            else:
                r = replace(r, config=replace(r.config, algorithm=algorithm))
        elif have == UNNAMED_SPECULATION:
            if algorithm == NO_SPECULATION:
                note = f"{where}: the report shows speculation; kept as speculative, not as a run without it"
            else:
                r = replace(r, config=replace(r.config, algorithm=algorithm))
        elif have.strip().upper() != algorithm:
            note = f"{where}: the file says {have}; kept"
    return r, note


def store_files(store: BenchStore, files: list[tuple[str, bytes, str]], *, server: str | None = None,
                algorithm: str | None = None) -> list[FileOutcome]:
    """Parse and store each ``(name, bytes, how)``; ``server`` and ``algorithm`` (see
    :func:`algorithm_choice`) fill in what a file does not say."""
    out = []
    for name, data, how in files:
        src = source_name(name, data, how)
        o = FileOutcome(src, _clean(name), hashlib.sha256(data).hexdigest()[:12])
        out.append(o)
        if len(data) > MAX_BYTES:
            o.error = f"{src}: {len(data) / 2**20:.0f} MiB is more than a benchmark file holds ({MAX_BYTES >> 20} MiB at most)"
            continue
        try:
            parsed = parse_bytes(data, src)
        except BenchImportError as exc:
            o.error = str(exc)
            continue
        o.skipped = [str(p) for p in parsed.problems]
        for r in parsed.results:
            r, note = fill_in(r, server=server, algorithm=algorithm)
            if note:
                o.notes.append(note)
            ins = store.insert(r)
            (o.new if ins.new else o.existing).append(ins.result.id)
            if ins.result.format and ins.result.format not in o.formats:
                o.formats.append(ins.result.format)
    return out


def summary(outcomes: list[FileOutcome]) -> str:
    """One line for the audit log and the page."""
    new = sum(len(o.new) for o in outcomes)
    old = sum(len(o.existing) for o in outcomes)
    bad = [o for o in outcomes if o.error]
    skipped = sum(len(o.skipped) for o in outcomes)
    parts = [f"{new} result{'s' if new != 1 else ''} stored from {len(outcomes) - len(bad)} of {len(outcomes)} file(s)"]
    if old:
        parts.append(f"{old} already stored")
    if skipped:
        parts.append(f"{skipped} part{'s' if skipped != 1 else ''} skipped")
    if bad:
        parts.append(f"{len(bad)} not imported")
    return ", ".join(parts)
