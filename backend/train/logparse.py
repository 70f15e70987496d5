"""SpecForge training console output, one line (or tqdm segment) at a time: ``str -> records``.

The three generations of SpecForge (see the reference notes, §2) print:

* Gen-1 (``train_eagle3_online/offline.py``): per-epoch summaries
  ``Train Epoch [6/6], position 0,  Acc: 0.68`` / ``…, pLoss: 0.49`` / ``Eval Epoch […]``;
* Gen-2 (``scripts/train_eagle3.py``): a tqdm bar per epoch
  ``Training Epoch 0:  27%|▌ | 457/1667 [09:28<21:09,  1.05s/it, loss=1.11, acc=0.34, acceptance_rate=0.52,
  time=1.05s, grad_norm=0.87]`` (redrawn after carriage returns) and, every ``--log-interval`` steps,
  ``Eval - Step 50 [51/10], position 0,  Acc: 0.45`` lines (the label says Eval for training metrics too,
  and the bracket counter means nothing);
* Gen-3 (``specforge train``): ``step 100: {'acc_0': 0.61, 'loss': 2.3, 'lr': 0.0001, …}``;

plus start-up, resume, checkpoint and vocab-mapping lines, and the supervisor's ``===== specdeck: NAME run ID
starting at …`` / ``ended at …`` lines around each run appended to the same log.  Every record carries
canonical metric names:
``loss``, ``acc``, ``acceptance_rate``, ``lr``, ``grad_norm``, ``step_time_s`` and per TTT position
``acc_{i}``, ``ploss_{i}``, ``acceptance_rate_{i}`` (Gen-3's ``perf/*`` keep their names).

:func:`parse_line` returns ``[]`` for a line that is none of these (ignored, not an error), raises
:class:`BadTrainLine` with a reason for a line that has a known shape but cannot be read, and drops a bad
value (nan, inf, a negative loss, an accuracy above 1, an absurd integer) from the record it belongs to,
naming it in ``record.rejected``.  Epochs are 0-based everywhere (Gen-1 prints ``[e+1/N]``).
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from dataclasses import asdict, dataclass, field
from collections.abc import Sequence
from typing import Any

from backend.logprefix import line_time

MAX_STEP = 10 ** 12
MAX_EPOCH = 10 ** 6
MAX_POSITION = 1023
MAX_DICT_CHARS = 20000  # a Gen-3 metrics dict longer than this is refused, not evaluated

_INF = float("inf")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RANK_PREFIX = re.compile(r"^\s*\[(?:rank|default)([0-9]{1,5})\]:\s?")
_RANK_WORD = re.compile(r"(?:^|\s|-\s)rank ([0-9]{1,5}): ")
_NUMBER = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?$")
_INT = "[0-9]{1,20}"

_BAR = re.compile(
    r"(?P<desc>(?:Training|Evaluating)(?: Epoch (?P<epoch>" + _INT + r"))?)\s*:\s*"
    r"(?:(?P<pct>[0-9]{1,3})%\|[^|]*\|\s*)?"
    r"(?P<n>" + _INT + r")(?:/(?P<total>" + _INT + r"))?(?:[a-z]+)?\s*\[(?P<inner>[^\]]*)(?P<close>\])?")
_EPOCH_LINE = re.compile(
    r"(?P<split>Train|Eval) Epoch \[(?P<e>" + _INT + r")/(?P<n>" + _INT + r")\], position (?P<pos>" + _INT
    + r"),\s*(?P<name>Acc|pLoss|Acceptance Rate):\s*(?P<value>\S+)\s*$")
_STEP_LINE = re.compile(
    r"Eval - Step (?P<step>" + _INT + r") \[[^\]]*\], position (?P<pos>" + _INT
    + r"),\s*(?P<name>Acc|pLoss|Acceptance Rate):\s*(?P<value>\S+)\s*$")
_STEP_DICT = re.compile(r"(?:^|[\s\]:])step (?P<step>" + _INT + r"): (?P<body>\{.*)$")
_TOTAL_STEPS = re.compile(r"Auto-calculated total_steps: (?P<total>" + _INT + r") \(num_epochs=(?P<epochs>"
                          + _INT + r") \* steps_per_epoch=(?P<spe>" + _INT + r")\)")
_START = re.compile(r"Starting training from epoch:\s*(?P<epoch>" + _INT + r")\s+step:\s*(?P<step>" + _INT + ")")
_LOADED = re.compile(r"Loaded training state from (?P<path>.+?): epoch=(?P<epoch>[^,\s]+), step=(?P<step>[^,\s]+)")
_RESTORED = re.compile(r"Restored optimizer/scheduler state: epoch=(?P<epoch>[^,\s]+), step=(?P<step>[^,\s]+)"
                       r"(?:, lr=(?P<lr>\S+))?")
_SAVED_STATE = re.compile(r"Saved full training state to (?P<path>.+?)/training_state\.pt\s*$")
_SAVED_CONFIG = re.compile(r"Saved model configuration to (?P<path>.+?)\s*$")
_COMPLETED = re.compile(r"Training completed at step (?P<step>" + _INT + r"), saving final checkpoint")
_VOCAB_RATIO = re.compile(r"top (?P<n>" + _INT + r") token frequency ratio: (?P<ratio>\S+)%")
_VOCAB_SAVED = re.compile(r"Saved vocab mapping to: (?P<path>.+?)\s*$")
_STAMP = r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
_RUN_MARK = re.compile(r"^===== specdeck: (?P<name>\S+) run (?P<run>\S+) (?:starting at (?P<start>" + _STAMP
                       + r"): (?P<cmd>.*)|ended at (?P<end>" + _STAMP + r"): (?P<how>.*)"
                       r"|could not start: (?P<err>.*))$")
_ARG = re.compile(r"^\s*(?P<key>[a-z][a-z0-9_]{0,63})\s+·{3,}\s*(?P<value>.*?)\s*$")

_LINE_METRIC = {"Acc": "acc", "pLoss": "ploss", "Acceptance Rate": "acceptance_rate"}
_POSTFIX_NAMES = {"time": "step_time_s", "avg_loss": "loss", "avg_acc": "acc"}
_EVAL_NAMES = {"avg_loss": "loss", "avg_acc": "acc", "per_position_acc": "acc"}
_STEP_TIME_KEY = "perf/optimizer_step_time_s"


class BadTrainLine(ValueError):
    """A line with a known shape that cannot be read; the message says why."""


@dataclass
class TrainRecord:
    kind: str  # metrics | progress | total_steps | start | resume | checkpoint | completed | vocab | arg |
    #            run_start | run_end (the supervisor's lines around each run appended to the log)
    source: str  # epoch_line (Gen-1) | bar | step_line (Gen-2) | step_dict (Gen-3) | log
    generation: int | None = None  # 1, 2 or 3 when the line's shape tells
    step: int | None = None
    epoch: int | None = None
    position: int | None = None
    split: str | None = None  # train | eval | None (not told by the line)
    metrics: dict[str, float] = field(default_factory=dict)
    wall_time: float | None = None  # epoch seconds of the line's own timestamp, when it has one
    elapsed_s: float | None = None  # tqdm's elapsed time within the bar
    rank: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    rejected: tuple[str, ...] = ()  # values dropped from this record, with why
    line_no: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rejected"] = list(self.rejected)
        return d


# -- values --------------------------------------------------------------------------------------

_SUFFIX = re.compile(r"^(.*?)_[0-9]+$")
_UNIT = frozenset(("acc", "acceptance_rate"))
_NON_NEGATIVE = frozenset(("loss", "ploss", "lr", "grad_norm", "time", "step_time_s"))


@functools.lru_cache(maxsize=4096)
def _rule(name: str) -> str:
    """How values of metric ``name`` are checked: unit (0..1), time (≥ 0, may end in 's'), non-negative,
    accept length, or any finite number."""
    short = name.rsplit("/", 1)[-1]
    m = _SUFFIX.match(short)
    base = m.group(1) if m else short
    if base in _UNIT:
        return "unit"
    if base in ("time", "step_time_s"):
        return "time"
    if base in _NON_NEGATIVE or name.startswith("perf/"):
        return "non_negative"
    if base == "simulated_acc_len":
        return "accept_length"
    return "any"


def check_value(name: str, value: Any) -> float:
    """``value`` as a float when it is a sane value of metric ``name``; ValueError naming what is wrong."""
    rule = _rule(name)
    if isinstance(value, str):
        text = value.strip()
        if rule == "time" and text.endswith("s"):
            text = text[:-1]
        if len(text) > 40 or not _NUMBER.match(text):
            if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
                raise ValueError(f"{name}: {text} is not a finite number")
            raise ValueError(f"{name}: {value[:40]!r} is not a number")
        v = float(text)
    elif isinstance(value, bool) or value is None:
        raise ValueError(f"{name}: {value!r} is not a number")
    elif isinstance(value, (int, float)):
        if isinstance(value, int) and abs(value) > 10 ** 18:
            raise ValueError(f"{name}: {value} is out of range")
        v = float(value)
    else:
        raise ValueError(f"{name}: {type(value).__name__} is not a number")
    if v != v or v in (_INF, -_INF):
        raise ValueError(f"{name}: {v} is not a finite number")
    if rule == "unit":
        if not 0.0 <= v <= 1.0 + 1e-9:
            raise ValueError(f"{name}: {v} is outside 0..1")
    elif rule in ("non_negative", "time"):
        if v < 0:
            raise ValueError(f"{name}: {v} is negative")
    elif rule == "accept_length" and not 0.0 <= v <= 1024:
        raise ValueError(f"{name}: {v} is not an accept length")
    if abs(v) > 1e15:
        raise ValueError(f"{name}: {v} is out of range")
    return v


def _int(text: str, what: str, limit: int) -> int:
    if not text.isascii() or not text.isdigit():
        raise BadTrainLine(f"{what} {text[:40]!r} is not a whole number")
    v = int(text)
    if v > limit:
        raise BadTrainLine(f"{what} {text[:40]} is out of range (at most {limit:,})")
    return v


def _int_value(text: str, what: str, limit: int) -> int:
    t = text.strip().rstrip(",")
    return _int(t, what, limit)


_CLOCK = re.compile(r"^\s*([0-9]{1,6})(?::([0-9]{1,6}))?(?::([0-9]{1,6}))?\s*$")


def _clock(text: str) -> float | None:
    """Seconds of a tqdm interval (``09:28``, ``1:02:03``); None for ``?``."""
    if text.isascii() and text.replace(":", "").isdigit():
        # the plain form, without the regular expression (each redraw prints two new ones)
        parts = text.split(":")
        if len(parts) == 2:
            a, b = parts
            if 0 < len(a) <= 6 and 0 < len(b) <= 6:
                return float(int(a) * 60 + int(b))
        elif len(parts) == 3:
            a, b, c = parts
            if 0 < len(a) <= 6 and 0 < len(b) <= 6 and 0 < len(c) <= 6:
                return float((int(a) * 60 + int(b)) * 60 + int(c))
        elif len(parts) == 1 and len(text) <= 6:
            return float(int(text))
    return _clock_by_expression(text)


def _clock_by_expression(text: str) -> float | None:
    """:func:`_clock` by its regular expression alone (spaces around allowed)."""
    m = _CLOCK.match(text)
    if not m or not text.isascii():
        return None
    secs = 0
    for p in m.groups():
        if p is not None:
            secs = secs * 60 + int(p)
    return float(secs)


_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(s/[a-z]+|[a-z]+/s)\s*$")
_METRIC_NAME = re.compile(r"^[A-Za-z][\w/]{0,63}$")


@functools.lru_cache(maxsize=4096)
def _rate_s_per_it(text: str) -> float | None:
    """Seconds per iteration from tqdm's rate (``1.05s/it``, ``3.2it/s``, ``1.67step/s``); None for ``?``."""
    m = _RATE.match(text)
    if not m:
        return None
    v = float(m.group(1))
    if m.group(2).startswith("s/"):
        return v
    return 1.0 / v if v > 0 else None


# -- lines ---------------------------------------------------------------------------------------

def strip_prefix(line: str) -> tuple[str, int | None]:
    """The line without terminal escapes and a rank prefix (``[rank0]:``, ``[default1]:``,
    ``rank 3: ``), and the rank."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    m = _RANK_PREFIX.match(line)
    if m:
        return line[m.end():], int(m.group(1))
    m = _RANK_WORD.search(line, 0, 200)
    if m:
        return line[:m.start(0)] + line[m.end():], int(m.group(1))
    return line, None


_BAR_STARTS = ("Training", "Evaluating")


def parse_line(line: str) -> list[TrainRecord]:
    """The records of one console line (or one carriage-return segment of a tqdm bar)."""
    if line.startswith(_BAR_STARTS):
        recs = _plain_bar(line)
        if recs is not None:
            return recs
    return _parse_any(line)


def _plain_bar(line: str) -> list[TrainRecord] | None:
    """A tqdm redraw with nothing around it (most segments of a training log), read the way
    :func:`_parse_any` reads it, without its tests for prefixes, timestamps and other shapes that such a
    line cannot have; None when the line may be anything else, for :func:`_parse_any` to read."""
    if "rank " in line[:200] or ": {" in line or "-" in line[:60] or "\x1b" in line:
        return None  # a rank word or terminal escapes to strip, a Gen-3 dict, or a timestamp to read
    m = _BAR.match(line)
    if m is None or not m.group("close") or line[m.end():].strip():
        return None
    return [_bar(m)]  # no rank prefix and no timestamp: rank and wall time stay None


def _parse_any(line: str) -> list[TrainRecord]:
    text, rank = strip_prefix(line)
    if not text.strip():
        return []
    recs = _dispatch(text)
    if recs:
        ts = line_time(text)[0]
        for r in recs:
            r.rank = rank
            if r.wall_time is None:
                r.wall_time = ts
    return recs


def _dispatch(text: str) -> list[TrainRecord]:
    if "step " in text and ": {" in text:
        m = _STEP_DICT.search(text)
        if m:
            return _step_dict(m)
    if ("Training" in text or "Evaluating" in text) and "[" in text:
        m = _BAR.search(text)
        if m:
            if not m.group("close"):
                raise BadTrainLine("tqdm bar not closed with ']': cut short")
            rec = _bar(m)
            rest = text[m.end():]
            if not rest.strip():
                return [rec]
            # a log line printed while the bar was drawn is glued to the bar's end (no newline between)
            try:
                more = _dispatch(rest)
            except BadTrainLine as exc:
                rec.rejected += (f"text after the bar: {exc}",)
                return [rec]
            ts = line_time(rest)[0]
            for r in more:
                if r.wall_time is None:
                    r.wall_time = ts
            return [rec] + more
    if "position" in text and "Epoch [" in text:
        m = _EPOCH_LINE.search(text)
        if m:
            return [_epoch_line(m)]
    if "position" in text and "Eval - Step" in text:
        m = _STEP_LINE.search(text)
        if m:
            return [_step_line(m)]
        raise BadTrainLine("an 'Eval - Step' line without the step, position, metric and value SpecForge prints")
    return _other(text)


def _single(name: str, value: str) -> tuple[dict[str, float], tuple[str, ...]]:
    try:
        return {name: check_value(name, value)}, ()
    except ValueError as exc:
        raise BadTrainLine(str(exc)) from None


def _epoch_line(m: re.Match) -> TrainRecord:
    e = _int(m.group("e"), "epoch", MAX_EPOCH)
    n = _int(m.group("n"), "number of epochs", MAX_EPOCH)
    if e < 1 or e > n:
        raise BadTrainLine(f"epoch [{e}/{n}] is not between 1 and the number of epochs")
    pos = _int(m.group("pos"), "position", MAX_POSITION)
    name = f"{_LINE_METRIC[m.group('name')]}_{pos}"
    metrics, _ = _single(name, m.group("value"))
    return TrainRecord("metrics", "epoch_line", generation=1, epoch=e - 1, position=pos,
                       split=m.group("split").lower(), metrics=metrics, info={"num_epochs": n})


def _step_line(m: re.Match) -> TrainRecord:
    step = _int(m.group("step"), "step", MAX_STEP)
    pos = _int(m.group("pos"), "position", MAX_POSITION)
    name = f"{_LINE_METRIC[m.group('name')]}_{pos}"
    metrics, _ = _single(name, m.group("value"))
    return TrainRecord("metrics", "step_line", generation=2, step=step, position=pos, metrics=metrics)


def _counted(text: str, what: str, limit: int) -> int:
    """A whole number the regular expression has already found to be 1-20 ASCII digits, with ``_int``'s
    bound and message."""
    v = int(text)
    if v > limit:
        raise BadTrainLine(f"{what} {text[:40]} is out of range (at most {limit:,})")
    return v


def _bar(m: re.Match) -> TrainRecord:
    desc, epoch_text, n_text, total_text, inner = m.group("desc", "epoch", "n", "total", "inner")
    split = "eval" if desc.startswith("Evaluating") else "train"
    epoch = _counted(epoch_text, "epoch", MAX_EPOCH) if epoch_text is not None else None
    n = _counted(n_text, "bar position", MAX_STEP)
    total = _counted(total_text, "bar total", MAX_STEP) if total_text is not None else None
    if total is not None and n > total:
        raise BadTrainLine(f"bar position {n} is past its total {total}")
    parts = inner.split(",")  # the postfix pairs are stripped where they are read (cached)
    elapsed = remaining = None
    head = parts[0].strip()
    if head:
        el, _, rem = head.partition("<")
        elapsed = _clock(el.strip())
        remaining = _clock(rem.strip()) if rem else None
        if elapsed is None:
            raise BadTrainLine(f"tqdm elapsed time {head[:40]!r} cannot be read")
    metrics, rejected, rate = _postfix(parts[1:])
    info: dict[str, Any] = {"n": n, "total": total, "remaining_s": remaining, "s_per_it": rate,
                            "desc": desc}
    kind = "metrics" if metrics else "progress"
    # A bar names no generation: Gen-1 and Gen-2 draw the same per-epoch bar, and Gen-3's whole-run
    # "Training: …step/s" bar is also what other trainers draw (NeMo Automodel's EAGLE-3 recipe prints the
    # same description and unit).  The generation comes from lines only SpecForge prints.
    return TrainRecord(kind, "bar", generation=None, epoch=epoch, split=split, metrics=metrics, elapsed_s=elapsed,
                       info=info, rejected=rejected)


def _postfix(parts: Sequence[str]) -> tuple[dict[str, float], tuple[str, ...], float | None]:
    """The metrics of a bar's postfix (``loss=1.11``, ``time=1.05s`` …), the values refused with why, and
    tqdm's rate (s/it)."""
    metrics: dict[str, float] = {}
    rejected: list[str] = []
    rate = None
    for p in parts:
        if "=" not in p:
            if rate is None and ("/s" in p or "s/" in p):
                rate = _rate_s_per_it(p.strip())
            continue
        name, value, why = _postfix_pair(p)
        if why is None:
            metrics[name] = value
        else:
            rejected.append(why)
    return metrics, tuple(rejected), rate


@functools.lru_cache(maxsize=65536)
def _postfix_pair(p: str) -> tuple[str, float, str | None]:
    """One ``key=value`` of a postfix: (canonical name, value, None), or (name, 0.0, why it is refused); a
    run prints the same pairs again and again, so they are read once."""
    key, _, value = p.strip().partition("=")
    key = key.strip()
    if not _METRIC_NAME.match(key):
        return key, 0.0, f"{key[:40]!r}: not a metric name"
    name = _POSTFIX_NAMES.get(key, key)
    try:
        return name, check_value(name, value), None
    except ValueError as exc:
        return name, 0.0, str(exc)


_PAIR = r"'[A-Za-z0-9_/.-]{1,128}': -?(?:[0-9]+(?:\.[0-9]*)?(?:e[-+]?[0-9]+)?|nan|inf)"
_FLAT_DICT = re.compile(r"^\{(?:" + _PAIR + r", )*" + _PAIR + r"\}$")
_FLAT_PAIR = re.compile(r"'([A-Za-z0-9_/.-]{1,128})': (-?(?:[0-9]+(?:\.[0-9]*)?(?:e[-+]?[0-9]+)?|nan|inf))")


def _read_dict(body: str) -> Any:
    """The printed dict: flat ``{'name': number, …}`` (what SpecForge prints) by a regular expression, anything
    else (lists, other spellings) by ``ast.literal_eval`` with nan/inf as text."""
    if _FLAT_DICT.match(body):
        return {k: v for k, v in _FLAT_PAIR.findall(body)}  # values stay text; check_value reads them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # odd escapes in a mangled line are not worth a warning
        return ast.literal_eval(_nan_to_text(body))


def _nan_to_text(body: str) -> str:
    return re.sub(r"(?<![\w'\"])(-?(?:nan|inf))(?![\w'\"])", r"'\1'", body)


def _step_dict(m: re.Match) -> list[TrainRecord]:
    step = _int(m.group("step"), "step", MAX_STEP)
    body = m.group("body").rstrip()
    if len(body) > MAX_DICT_CHARS:
        raise BadTrainLine(f"metrics dict of {len(body):,} characters is longer than {MAX_DICT_CHARS:,}")
    if not body.endswith("}"):
        raise BadTrainLine("metrics dict is not closed with '}'")
    try:
        data = _read_dict(body)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise BadTrainLine(f"metrics dict cannot be read: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise BadTrainLine("the text after 'step N:' is not a dict")
    train: dict[str, float] = {}
    ev: dict[str, float] = {}
    rejected: list[str] = []
    for key, value in data.items():
        if not isinstance(key, str) or not key or len(key) > 128:
            rejected.append(f"{str(key)[:40]!r}: not a metric name")
            continue
        target = train
        name = key
        if key.startswith("eval/"):
            target, name = ev, key[5:]
            name = _EVAL_NAMES.get(name, name)
        elif key.startswith("train/"):
            name = key[6:]
        if isinstance(value, (list, tuple)):
            for i, v in enumerate(value[:MAX_POSITION + 1]):
                try:
                    target[f"{name}_{i}"] = check_value(f"{name}_{i}", v)
                except ValueError as exc:
                    rejected.append(str(exc))
            continue
        try:
            target[name] = check_value(key, value)
        except ValueError as exc:
            rejected.append(str(exc))
    if not train and not ev:
        raise BadTrainLine("; ".join(rejected[:5]) if rejected else "metrics dict holds no metric value")
    if _STEP_TIME_KEY in train:
        train["step_time_s"] = train[_STEP_TIME_KEY]
    out = []
    if train:
        out.append(TrainRecord("metrics", "step_dict", generation=3, step=step, split="train", metrics=train,
                               rejected=tuple(rejected)))
    if ev:
        out.append(TrainRecord("metrics", "step_dict", generation=3, step=step, split="eval", metrics=ev,
                               rejected=() if out else tuple(rejected)))
    return out


def _run_mark(m: re.Match) -> TrainRecord:
    """The supervisor's line before and after each run appended to the same log."""
    info: dict[str, Any] = {"process": m.group("name"), "run_id": m.group("run")}
    stamp = m.group("start") or m.group("end")
    ts = line_time(stamp)[0] if stamp else None
    if m.group("cmd") is not None:
        info["command"] = m.group("cmd")
        return TrainRecord("run_start", "supervisor", info=info, wall_time=ts)
    if m.group("err") is not None:
        info["error"] = m.group("err")
        return TrainRecord("run_end", "supervisor", info=info)
    how = m.group("how")
    info["how"] = how
    code = re.match(r"^(exit code|killed by signal) ([0-9]{1,3})", how)
    if code:
        info["exit_code"] = int(code.group(2)) * (-1 if code.group(1).startswith("killed") else 1)
    return TrainRecord("run_end", "supervisor", info=info, wall_time=ts)


def _other(text: str) -> list[TrainRecord]:
    if text.startswith("===== specdeck: "):
        m = _RUN_MARK.match(text)
        if m:
            return [_run_mark(m)]
    m = _TOTAL_STEPS.search(text)
    if m:
        total = _int(m.group("total"), "total_steps", MAX_STEP)
        return [TrainRecord("total_steps", "log", generation=2,
                            info={"total_steps": total, "num_epochs": _int(m.group("epochs"), "num_epochs", MAX_EPOCH),
                                  "steps_per_epoch": _int(m.group("spe"), "steps_per_epoch", MAX_STEP)})]
    m = _START.search(text)
    if m:
        epoch = _int(m.group("epoch"), "epoch", MAX_EPOCH)
        step = _int(m.group("step"), "step", MAX_STEP)
        return [TrainRecord("start", "log", generation=2, step=step, epoch=epoch,
                            info={"resumed": bool(step or epoch)})]
    m = _LOADED.search(text) or _RESTORED.search(text)
    if m:
        epoch = _int_value(m.group("epoch"), "epoch", MAX_EPOCH)
        step = _int_value(m.group("step"), "step", MAX_STEP)
        info: dict[str, Any] = {}
        metrics: dict[str, float] = {}
        gd = m.groupdict()
        if gd.get("path"):
            info["path"] = gd["path"]
        if gd.get("lr"):
            metrics, _ = _single("lr", gd["lr"].rstrip(","))
        return [TrainRecord("resume", "log", generation=2, step=step, epoch=epoch, metrics=metrics, info=info)]
    m = _SAVED_STATE.search(text)
    if m:
        return [TrainRecord("checkpoint", "log", generation=2,
                            info={"path": m.group("path"), "what": "training_state"})]
    m = _SAVED_CONFIG.search(text)
    if m:
        return [TrainRecord("checkpoint", "log", generation=2, info={"path": m.group("path"), "what": "config"})]
    m = _COMPLETED.search(text)
    if m:
        return [TrainRecord("completed", "log", generation=2, step=_int(m.group("step"), "step", MAX_STEP))]
    m = _VOCAB_RATIO.search(text)
    if m:
        text_ratio = m.group("ratio")
        if len(text_ratio) > 20 or not _NUMBER.match(text_ratio) or not 0.0 <= float(text_ratio) <= 100.0:
            raise BadTrainLine(f"token frequency ratio {text_ratio[:20]!r}% is not a percentage")
        ratio = round(float(text_ratio), 6)
        return [TrainRecord("vocab", "log", info={"draft_vocab_size": _int(m.group("n"), "draft vocab", MAX_STEP),
                                                  "top_ratio_pct": ratio})]
    m = _VOCAB_SAVED.search(text)
    if m:
        return [TrainRecord("vocab", "log", info={"path": m.group("path")})]
    m = _ARG.match(text)
    if m:
        return [TrainRecord("arg", "log", info={"key": m.group("key"), "value": m.group("value")})]
    return []
