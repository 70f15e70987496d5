"""The parameters of a regeneration run and its ``OUT.job.json``.

``JobConfig`` is what ``regen run`` was given: the inputs (files, each its own dataset named after
the file) or a mix of the workspace (stored resolved, with its files), the servers, sampling
(temperature, top_p, max_tokens), the reasoning mode (SpecForge's: ``none``; ``save`` keeps
``reasoning_content``; ``disable`` sends ``chat_template_kwargs.enable_thinking = false``), an
optional system prompt, the concurrency per server.  It is written to ``OUT.job.json`` at every
start, so a resume with no arguments runs with the same parameters.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from backend.filemodes import make_private_dirs, write_private
from backend.readcap import CONFIG_JSON_MAX, load_json_capped
from backend.regen.output import RunFiles

if TYPE_CHECKING:  # pydantic is imported only for a mix (a run of --input files never needs it)
    from backend.regen.catalog import MixConfig

REASONING = ("none", "save", "disable")
FIRST_BYTE_S = 600.0          # queueing and prefill until the first byte of an answer
SLOWEST_DECODE_TOK_S = 10.0   # not streamed, the first byte comes with the whole answer: allow
                              # max_tokens at this rate on top of FIRST_BYTE_S
CHUNK_S = 120.0               # streamed: the longest pause between two chunks of an answer
STARTUP_S = 300.0             # how long to wait for any server to answer at all before giving up

_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?")
_SCHEME_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/")


class ServerURLError(ValueError):
    """A server address that is not http(s)://host:port."""


def normalize_url(url: str) -> str:
    """``http://host:port`` without a trailing slash or ``/v1``; a bare ``host:port`` gets http://.

    Refused, with the reason: white space, a scheme other than http/https (``htp:/x`` included:
    it is not taken as the host ``htp``), a host that is not a host name or IP address, a port
    that is not a number, a query or a fragment.
    """
    u = url.strip()
    hint = "(use http://host:port)"
    if not u:
        raise ServerURLError(f"{url!r}: an empty server address {hint}")
    if any(c.isspace() or ord(c) < 32 for c in u):
        raise ServerURLError(f"{url!r}: a server address has no spaces or control characters {hint}")
    if "://" not in u:
        if _SCHEME_LIKE.match(u):
            raise ServerURLError(f"{url!r}: not a server address: {u.split(':', 1)[0]!r} is not http or https "
                                 f"and '//' is missing {hint}")
        u = "http://" + u
    parts = urlsplit(u)
    if parts.scheme.lower() not in ("http", "https"):
        raise ServerURLError(f"{url!r}: the scheme {parts.scheme!r} is not http or https {hint}")
    host = parts.hostname or ""
    if not host:
        raise ServerURLError(f"{url!r}: no host {hint}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOST.fullmatch(host) or len(host) > 253:
            raise ServerURLError(f"{url!r}: {host!r} is not a host name or an IP address {hint}") from None
    try:
        port = parts.port
    except ValueError:
        raise ServerURLError(f"{url!r}: the port is not a number from 0 to 65535 {hint}") from None
    if port is None and parts.netloc.endswith(":"):
        raise ServerURLError(f"{url!r}: no port after ':' {hint}")
    if parts.query or parts.fragment or u.endswith(("?", "#")):
        raise ServerURLError(f"{url!r}: a server address has no query or fragment {hint}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    return f"{parts.scheme.lower()}://{parts.netloc}{path}"


@dataclass(kw_only=True)
class Sampling:
    """What a run asks of its servers, with the defaults and limits: requests at once per server, the
    answer's length, sampling, the reasoning mode and a system prompt.  ``regen run``'s
    :class:`JobConfig` and the page's start form (:class:`backend.regen.control.RunForm`) both hold them."""

    concurrency: int = 64
    max_tokens: int = 4096
    temperature: float = 0.7
    top_p: float | None = None
    reasoning: str = "none"
    system_prompt: str | None = None

    def check_limits(self) -> None:
        """:class:`ValueError` naming the first parameter outside its limits."""
        if self.concurrency < 1:
            raise ValueError(f"concurrency: {self.concurrency} is not >= 1")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens: {self.max_tokens} is not >= 1")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature: {self.temperature} is not in [0, 2]")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p: {self.top_p} is not in (0, 1]")
        if self.reasoning not in REASONING:
            raise ValueError(f"reasoning: {self.reasoning!r} is not one of {', '.join(REASONING)}")


@dataclass
class ServerSpec:
    url: str
    name: str | None = None
    # an sglang-router's Prometheus exporter (http://host:port), when the server is a [[router]]: the job
    # records the workers behind it from there (backend/regen/behind.py)
    metrics: str | None = None


@dataclass
class JobConfig(Sampling):
    out: Path
    servers: list[ServerSpec]
    inputs: list[str] = field(default_factory=list)   # input files (each its own dataset)
    mix: dict[str, Any] | None = None                 # a MixConfig as a dict (entries with files)
    root: str | None = None                           # where the mix's relative files are
    model: str | None = None
    # Streamed answers show a stalled server between chunks, but a chunk per token costs the client
    # about three times the CPU (3.9 s against 1.2 s for 95,000 tokens from the simulator at 64 in
    # flight): whole answers by default, streamed on request.
    stream: bool = False
    first_byte_timeout: float | None = None   # None: first_byte_s below
    chunk_timeout: float = CHUNK_S
    startup_timeout: float = STARTUP_S
    max_attempts: int = 10

    @property
    def first_byte_s(self) -> float:
        """Seconds from sending a request to the first byte of its answer before it is asked again:
        FIRST_BYTE_S streamed; not streamed (the whole answer), that plus max_tokens at
        SLOWEST_DECODE_TOK_S (4,096 tokens: 1,010 s)."""
        if self.first_byte_timeout is not None:
            return self.first_byte_timeout
        return FIRST_BYTE_S if self.stream else FIRST_BYTE_S + self.max_tokens / SLOWEST_DECODE_TOK_S

    def check(self) -> None:
        if not self.servers:
            raise ValueError("no server: give --server URL_OR_NAME")
        if bool(self.inputs) == bool(self.mix):
            raise ValueError("give the inputs (--input FILE ...) or a mix (--mix NAME), one of the two")
        self.check_limits()
        for s in self.servers:
            normalize_url(s.url)
        for name in ("first_byte_timeout", "chunk_timeout", "startup_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name}: {value} is not > 0")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts: {self.max_attempts} is not >= 1")
        if self.system_prompt and re.search("[\ud800-\udfff]", self.system_prompt):
            raise ValueError("system_prompt: holds a lone surrogate (not valid Unicode; it cannot be sent as UTF-8)")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "JobConfig":
        d = dict(d)
        d["out"] = Path(d["out"])
        d["servers"] = [ServerSpec(**s) for s in d.get("servers") or []]
        old = d.get("request_timeout")  # before first_byte_timeout, one timeout for the whole answer
        if "first_byte_timeout" not in d and old is not None and old != 3600.0:  # 3600: its default
            d["first_byte_timeout"] = old
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    def mix_config(self) -> "MixConfig | InputMix":
        """What :func:`backend.regen.datasets.read_mix` reads: the mix, or the input files as one."""
        if self.mix is not None:
            from backend.regen.catalog import MixConfig

            return MixConfig.model_validate(self.mix)
        entries, names = [], set()
        for p in self.inputs:
            name = dataset_name(Path(p), names)
            names.add(name)
            entries.append(InputEntry(dataset=name, file=str(Path(p).expanduser().resolve())))
        return InputMix(entries=tuple(entries))


@dataclass(frozen=True)
class InputEntry:
    """One ``--input`` file, read whole: the fields of a mix entry that the reader uses."""

    dataset: str
    file: str
    name: str = "inputs"
    first_turn_only: bool = False
    max_prompt_chars: int | None = None
    samples: int | None = None


@dataclass(frozen=True)
class InputMix:
    entries: tuple[InputEntry, ...]
    name: str = "inputs"


def dataset_name(path: Path, taken: set[str]) -> str:
    """The dataset name of an input file: its stem in catalog characters, unique among ``taken``."""
    stem = path.name.split(".")[0] or "input"
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-._")[:60] or "input"
    if not base[0].isalnum():
        base = "d" + base
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def write_job_json(files: RunFiles, cfg: JobConfig) -> None:
    make_private_dirs(files.job.parent)
    try:
        write_private(files.job, json.dumps(cfg.to_json(), indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(files.job)) from exc


def read_job_json(files: RunFiles) -> JobConfig:
    try:
        return JobConfig.from_json(load_json_capped(files.job, CONFIG_JSON_MAX, "a job file"))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{files.job}: cannot read the run's parameters: {exc}") from None
