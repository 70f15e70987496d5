"""What a managed process is: its spec, readiness probe and restart policy, and its states.

Specs are plain frozen dataclasses so they can be stored as JSON in the
state store and compared for equality when a config changes.  The supervisor
(``backend/supervisor``) runs them; ``state/processes.py`` stores them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Literal


# A process's log is rotated by its wrapper at this size, keeping this many older files
# (NAME.1 … NAME.<keep>); see backend/supervisor/logrotate.py.
LOG_MAX_BYTES = 100 * 1024 * 1024
LOG_KEEP = 5


class Kind(str, Enum):
    SERVER = "server"
    REGENERATION = "regeneration"
    TRAINING = "training"
    BENCHMARK = "benchmark"
    OTHER = "other"


class ProcState(str, Enum):
    """Lifecycle states; see backend/supervisor/machine.py for transitions."""

    STARTING = "STARTING"  # spawned, readiness probe not yet passed
    RUNNING = "RUNNING"  # readiness probe passed (or there is none)
    BACKOFF = "BACKOFF"  # exited with failure, waiting to be restarted
    STOPPING = "STOPPING"  # SIGTERM sent, waiting for the grace period
    EXITED = "EXITED"  # ended; exit_code says how
    FATAL = "FATAL"  # gave up restarting, or could not be spawned
    UNKNOWN = "UNKNOWN"  # recorded as alive, but neither found nor ended
    NEVER = "NEVER"  # registered from the config, never started

    @property
    def is_active(self) -> bool:
        return self in (ProcState.STARTING, ProcState.RUNNING, ProcState.STOPPING)

    @property
    def is_terminal(self) -> bool:
        return self in (ProcState.EXITED, ProcState.FATAL)


@dataclass(frozen=True)
class ReadinessProbe:
    """How to tell that a started process is ready.

    ``none``: ready as soon as it is spawned.  ``http``: ready when ``url``
    answers 200.  ``log``: ready when a line of the process's log matches the
    regular expression ``pattern``.  ``timeout_s`` bounds the wait; after it,
    the process stays STARTING and the view says the probe is overdue.
    """

    kind: Literal["none", "http", "log"] = "none"
    url: str | None = None
    pattern: str | None = None
    interval_s: float = 1.0
    timeout_s: float = 900.0

    def describe(self) -> str:
        if self.kind == "http":
            return f"HTTP 200 from {self.url}"
        if self.kind == "log":
            return f"log line /{self.pattern}/"
        return "none"


@dataclass(frozen=True)
class RestartPolicy:
    """``never``, or ``on-failure`` up to ``max_tries`` restarts with
    exponential backoff (``backoff_s`` doubling up to ``backoff_max_s``),
    then FATAL."""

    mode: Literal["never", "on-failure"] = "never"
    max_tries: int = 3
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0

    def delay_for(self, tries: int) -> float:
        """Backoff before restart number ``tries`` (1-based)."""
        return min(self.backoff_max_s, self.backoff_s * (2 ** max(0, tries - 1)))


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    kind: Kind
    argv: tuple[str, ...]
    log_path: str
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    readiness: ReadinessProbe = field(default_factory=ReadinessProbe)
    stop_grace_s: float = 10.0
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    log_max_bytes: int = LOG_MAX_BYTES  # 0: never rotate
    log_keep: int = LOG_KEEP
    # Where it runs: "local" (a child of this machine's supervisor) or "ray" (a job on the
    # workspace's [cluster]); the placement fields below only apply to "ray".
    where: Literal["local", "ray"] = "local"
    num_gpus: float = 0.0  # Ray's entrypoint_num_gpus
    num_cpus: float = 0.0  # Ray's entrypoint_num_cpus
    resources: dict[str, float] = field(default_factory=dict)  # Ray's entrypoint_resources (node pinning)

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "/\\\0"):
            raise ValueError(f"process name {self.name!r}: must be non-empty without slashes")
        if not self.argv:
            raise ValueError(f"process {self.name}: argv is empty")
        if self.where not in ("local", "ray"):
            raise ValueError(f"process {self.name}: where is 'local' or 'ray' (got {self.where!r})")
        if self.num_gpus < 0 or self.num_cpus < 0 or any(v < 0 for v in self.resources.values()):
            raise ValueError(f"process {self.name}: num_gpus, num_cpus and resources are never negative")
        object.__setattr__(self, "resources", {str(k): float(v) for k, v in self.resources.items()})
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))
        object.__setattr__(self, "kind", Kind(self.kind))

    @property
    def on_ray(self) -> bool:
        return self.where == "ray"

    def __hash__(self) -> int:  # env is a dict
        return hash((self.name, self.kind, self.argv, self.log_path))

    def to_json(self) -> str:
        d = asdict(self)
        d["kind"] = self.kind.value
        d["argv"] = list(self.argv)
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ProcessSpec":
        d = dict(d)
        d["readiness"] = ReadinessProbe(**d.get("readiness") or {})
        d["restart"] = RestartPolicy(**d.get("restart") or {})
        d["argv"] = tuple(d["argv"])
        d["kind"] = Kind(d["kind"])
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "ProcessSpec":
        return cls.from_dict(json.loads(text))
