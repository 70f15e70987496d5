"""The datasets a workspace knows and the mixes regeneration draws from them.

In ``specdeck.toml`` every ``[[dataset]]`` table is one catalog entry and every ``[[mix]]`` table
is one line of a mix; the ``[[mix]]`` tables that share a ``name`` form one mix, in file order::

    [[dataset]]
    name = "humaneval-x"                 # how mixes and the page refer to it
    source = "zai-org/humaneval-x"       # where it comes from (a Hugging Face id or a URL)
    size = 820                           # rows in the original dataset (leave out when not known)
    license = "Apache-2.0"               # leave out when not known: shown as N/A
    domain = "code"
    file = "datasets/humaneval-x.jsonl"  # the prompts, relative to the workspace folder
    notes = "5 languages with parallel implementations"

    [[mix]]
    name = "code-mix"
    dataset = "humaneval-x"
    samples = 100            # the first 100 usable rows of the file; leave out for all of them
    first_turn_only = true   # ask only the first user turn (system turns are kept)
    max_prompt_chars = 16000 # skip rows whose prompt is longer, in characters
    # file = "..."           # another file of the same dataset instead of the catalog's

:func:`check_catalog` is the workspace's validation hook: a mix line must name a catalog dataset
and a mix may name a dataset only once.  :func:`mixes` gives every mix as a :class:`MixConfig`
whose entries have their file filled in from the catalog, ready for
:func:`backend.regen.datasets.read_mix`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from backend.validation import check_name

DEFAULT_MIX = "default"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _check_file(v: str | None) -> str | None:
    if v is not None and not v.strip():
        raise ValueError("is empty; give a path relative to the workspace folder")
    return v


class DatasetConfig(_Model):
    """One ``[[dataset]]`` of the catalog."""

    name: str
    source: str = Field(min_length=1)
    size: int | None = Field(None, ge=0)  # rows in the original dataset; None: not known
    license: str | None = None  # None: not known (shown as N/A)
    domain: str = "general"
    file: str  # the prompt file, relative to the workspace folder
    notes: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("file")
    @classmethod
    def _file(cls, v: str | None) -> str | None:
        return _check_file(v)


class MixEntry(_Model):
    """One ``[[mix]]`` line: how many rows of which dataset, with which filters."""

    name: str = DEFAULT_MIX  # the mix this line belongs to
    dataset: str
    file: str | None = None  # None: the catalog's file for the dataset
    samples: int | None = Field(None, ge=0)  # None: every usable row
    first_turn_only: bool = False
    max_prompt_chars: int | None = Field(None, gt=0)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("file")
    @classmethod
    def _file(cls, v: str | None) -> str | None:
        return _check_file(v)


class MixConfig(_Model):
    """A named mix: its entries in order (what a regeneration run reads)."""

    name: str = DEFAULT_MIX
    entries: list[MixEntry] = Field(min_length=1)

    @property
    def datasets(self) -> list[str]:
        return [e.dataset for e in self.entries]

    @property
    def samples(self) -> int | None:
        """Rows the mix asks for at most; None when an entry takes every row of its file."""
        if any(e.samples is None for e in self.entries):
            return None
        return sum(e.samples or 0 for e in self.entries)


def check_catalog(datasets: Sequence[DatasetConfig], mix: Sequence[MixEntry]) -> list[tuple[tuple, str]]:
    """Problems as (location in the config, reason); the workspace adds file and line."""
    problems: list[tuple[tuple, str]] = []
    names: set[str] = set()
    for i, d in enumerate(datasets):
        if d.name in names:
            problems.append((("dataset", i, "name"), f"dataset {d.name!r} is defined twice"))
        names.add(d.name)
    used: set[tuple[str, str]] = set()
    for i, e in enumerate(mix):
        if e.dataset not in names:
            known = ", ".join(sorted(names)) or "none: add a [[dataset]] table"
            problems.append((("mix", i, "dataset"), f"{e.dataset!r} is not a catalog dataset (known: {known})"))
        if (e.name, e.dataset) in used:
            problems.append((("mix", i, "dataset"), f"mix {e.name!r} already takes {e.dataset!r}; "
                             "give it one [[mix]] line (samples adds up there)"))
        used.add((e.name, e.dataset))
    return problems


def mixes(datasets: Iterable[DatasetConfig], mix: Iterable[MixEntry]) -> dict[str, MixConfig]:
    """Every mix by name, in file order, each entry's file taken from the catalog when not given."""
    files = {d.name: d.file for d in datasets}
    grouped: dict[str, list[MixEntry]] = {}
    for e in mix:
        if e.file is None and e.dataset in files:
            e = e.model_copy(update={"file": files[e.dataset]})
        grouped.setdefault(e.name, []).append(e)
    return {name: MixConfig(name=name, entries=entries) for name, entries in grouped.items()}


def resolve_mix(mix: MixConfig, datasets: Iterable[DatasetConfig]) -> MixConfig:
    """``mix`` with each entry's file filled in from the catalog (a mix built outside the file)."""
    files = {d.name: d.file for d in datasets}
    missing = [e.dataset for e in mix.entries if e.file is None and e.dataset not in files]
    if missing:
        raise ValueError(f"mix {mix.name!r}: {', '.join(map(repr, missing))} not in the catalog and no file given")
    return mix.model_copy(update={"entries": [
        e if e.file is not None else e.model_copy(update={"file": files[e.dataset]}) for e in mix.entries]})
