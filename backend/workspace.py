"""The workspace: one folder holding the config file, state, logs and outputs.

Layout::

    <root>/specdeck.toml     the workspace config (validated, see below)
    <root>/state.db          SQLite state (state/ owns it)
    <root>/logs/<name>.log   one log file per managed process
    <root>/run/              identity and exit files written by process wrappers
    <root>/outputs/          job outputs (unless outputs_dir says otherwise)

A flag (``--workspace``) or the ``SPECDECK_WORKSPACE`` environment variable
selects the folder.  With neither, a demo workspace is created under
``$SPECDECK_HOME/demo`` (default ``~/.specdeck/demo``) so that the first
command shows a working dashboard on any machine.

Every mistake in the config file is reported as ``file:line: key: reason``.
"""

from __future__ import annotations

import errno
import os
import re
import tomllib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from pydantic import Field, ValidationError, field_validator, model_validator

from backend.tomllines import describe_error, locate
from backend.wsmodels import ClusterConfig, PrometheusConfig, _check_resources, _Model
from backend.validation import check_name
from specdeck_types.process import LOG_KEEP, LOG_MAX_BYTES, Kind, ProcessSpec, ReadinessProbe, RestartPolicy

CONFIG_NAME = "specdeck.toml"
REPO_ROOT = Path(__file__).resolve().parent.parent


class ConfigError(ValueError):
    """A workspace config problem; ``str(e)`` is the message for the user."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


# Upper bounds of the durations in the file: generous for a slow model load,
# small enough that no value parks a process or a probe for good.
MAX_PROBE_INTERVAL_S = 3600.0  # readiness.interval_s: at most an hour between probes
MAX_PROBE_TIMEOUT_S = 7 * 86400.0  # readiness.timeout_s: a week
MAX_BACKOFF_S = 3600.0  # restart.backoff_s: the first wait, at most an hour
MAX_BACKOFF_MAX_S = 86400.0  # restart.backoff_max_s: the longest wait, a day


class ReadinessConfig(_Model):
    kind: Literal["none", "http", "log"] = "none"
    url: str | None = None
    pattern: str | None = None
    interval_s: float = Field(1.0, gt=0, le=MAX_PROBE_INTERVAL_S)
    timeout_s: float = Field(900.0, gt=0, le=MAX_PROBE_TIMEOUT_S)

    @model_validator(mode="after")
    def _check(self) -> "ReadinessConfig":
        if self.kind == "http" and not (self.url or "").startswith(("http://", "https://")):
            raise ValueError("an http probe needs url = 'http://host:port/path'")
        if self.kind == "log":
            if not self.pattern:
                raise ValueError("a log probe needs pattern = '<regular expression>'")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern is not a valid regular expression: {exc}") from None
        return self


class RestartConfig(_Model):
    mode: Literal["never", "on-failure"] = "never"
    max_tries: int = Field(3, ge=0, le=100)
    backoff_s: float = Field(1.0, ge=0, le=MAX_BACKOFF_S)
    backoff_max_s: float = Field(60.0, ge=0, le=MAX_BACKOFF_MAX_S)


class ProcessConfig(_Model):
    name: str
    kind: Kind = Kind.OTHER
    argv: list[str] = Field(min_length=1)
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    stop_grace_s: float = Field(10.0, ge=0, le=3600)
    autostart: bool = False
    readiness: ReadinessConfig = Field(default_factory=ReadinessConfig)
    restart: RestartConfig = Field(default_factory=RestartConfig)
    # the log is rotated at this size (0: never), keeping log_keep older files NAME.1 … NAME.<keep>
    log_max_mb: float = Field(LOG_MAX_BYTES / 2**20, ge=0, le=2**20)
    log_keep: int = Field(LOG_KEEP, ge=1, le=1000)
    # "ray": a job on the workspace's [cluster], placed by num_gpus, num_cpus and resources
    where: Literal["local", "ray"] = "local"
    num_gpus: float = Field(0.0, ge=0, le=1024)
    num_cpus: float = Field(0.0, ge=0, le=4096)
    resources: dict[str, float] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("resources")
    @classmethod
    def _resources(cls, v: dict[str, float]) -> dict[str, float]:
        return _check_resources(v)

    @field_validator("argv")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if any(not a for a in v[:1]):
            raise ValueError("the program (argv[0]) is empty")
        return v


class TelemetryConfig(_Model):
    source: Literal["auto", "nvml", "fake"] = "auto"
    interval_s: float = Field(1.0, ge=0.1, le=60)
    volumes: list[str] = Field(default_factory=list)
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)


class AlertsConfig(_Model):
    """``[alerts]``: where notifications go, how often, and each rule's threshold
    (see backend/alerts/rules.py).  ``deadlines`` maps a regeneration job's name to the time it
    must be done by (a TOML date-time); ``base_url`` starts the links in notifications."""

    webhook: str | None = None
    command: list[str] = Field(default_factory=list)
    base_url: str = ""
    interval_s: float = Field(15.0, ge=1, le=3600)
    max_per_hour: int = Field(20, ge=1, le=1000)
    repeat_s: float = Field(3600.0, ge=0, le=7 * 86400.0)
    deadlines: dict[str, datetime] = Field(default_factory=dict)
    accept_floor: float = Field(1.05, ge=1.0, le=10.0)
    accept_window_s: float = Field(60.0, ge=1, le=86400)
    slower_ratio: float = Field(0.95, gt=0, le=10.0)
    steady_window_s: float = Field(300.0, ge=10, le=86400)
    stall_s: float = Field(600.0, ge=10, le=7 * 86400.0)
    error_rate: float = Field(0.10, ge=0, le=1)
    error_window_s: float = Field(600.0, ge=10, le=86400)
    restart_loop: int = Field(3, ge=1, le=1000)
    gpu_mem_fraction: float = Field(0.95, gt=0, le=1)
    gpu_idle_util: float = Field(5.0, ge=0, le=100)
    gpu_idle_s: float = Field(300.0, ge=10, le=86400)
    disk_min_free_gb: float = Field(5.0, ge=0, le=1e6)

    @field_validator("webhook")
    @classmethod
    def _webhook(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"https?://[^\s/]+", v):
            raise ValueError(f"the webhook is an http:// or https:// URL (got {v!r})")
        return v

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str) -> str:
        if v and not re.match(r"https?://[^\s/]+", v):
            raise ValueError(f"base_url is the dashboard's http:// or https:// address (got {v!r})")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if v and not v[0].strip():
            raise ValueError("the program (command[0]) is empty")
        return v


class AccessConfig(_Model):
    """``[access]``: who sees what when the dashboard is opened from a browser.

    ``anonymous_view``: a browser that reaches the dashboard from the network
    and has not signed in sees figures and states (never prompts, answers,
    logs or command lines, never a path it typed, never a program run);
    off by default: such a browser gets the sign-in page and nothing else.
    ``roots``: folders besides the workspace under which paths typed in the
    dashboard (logs to follow, outputs, checkpoints, datasets) may lie, after
    symlinks are resolved.  ``loopback_token``: a browser on this host must
    open the URL with the token printed at start (or sign in), as Jupyter
    does; turn it off on a single-user machine.  ``sessions_per_address``:
    open browser sessions allowed from one address.
    """

    anonymous_view: bool = False
    roots: list[str] = Field(default_factory=list)
    loopback_token: bool = True
    sessions_per_address: int = Field(20, ge=1, le=1000)

    @field_validator("roots")
    @classmethod
    def _roots(cls, v: list[str]) -> list[str]:
        for r in v:
            if not r.strip():
                raise ValueError("a root is an empty string")
            if not Path(r).expanduser().is_absolute():
                raise ValueError(f"a root is an absolute folder (got {r!r})")
        return v


class WorkspaceSection(_Model):
    name: str = "workspace"
    outputs_dir: str = "outputs"
    demo: bool = False


class WorkspaceConfig(_Model):
    workspace: WorkspaceSection = Field(default_factory=WorkspaceSection)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    access: AccessConfig = Field(default_factory=AccessConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    cluster: ClusterConfig | None = None
    process: list[ProcessConfig] = Field(default_factory=list)
    # The domains' tables, each parsed by its domain: [[server]] and [[router]] by backend.sglang,
    # [[dataset]] and [[mix]] by backend.regen.catalog, [[train]] by backend.train.config.  Here they
    # are only lists of tables; backend.flows.workspace composes the whole check.
    server: list[dict[str, Any]] = Field(default_factory=list)
    router: list[dict[str, Any]] = Field(default_factory=list)
    dataset: list[dict[str, Any]] = Field(default_factory=list)
    mix: list[dict[str, Any]] = Field(default_factory=list)
    train: list[dict[str, Any]] = Field(default_factory=list)


# A domain's check of its own tables: (the parsed config, the file's text, its path) -> problems, each
# "path:line: key: why".
TableCheck = Callable[[WorkspaceConfig, str, "Path | str"], list[str]]


@dataclass
class Workspace:
    root: Path
    config_path: Path
    config: WorkspaceConfig
    # How the config was parsed (see parse_config); an edit written back is parsed the same way.
    model: type[WorkspaceConfig] = WorkspaceConfig
    checks: Sequence[TableCheck] = ()

    @property
    def name(self) -> str:
        return self.config.workspace.name

    @property
    def is_demo(self) -> bool:
        return self.config.workspace.demo

    @property
    def store_path(self) -> Path:
        return self.root / "state.db"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def outputs_dir(self) -> Path:
        p = Path(self.config.workspace.outputs_dir).expanduser()
        return p if p.is_absolute() else self.root / p

    @property
    def read_roots(self) -> list[Path]:
        """Folders under which a path typed in the dashboard may lie: the workspace, the outputs
        folder and ``[access] roots``, symlinks resolved."""
        out: list[Path] = []
        for p in (self.root, self.outputs_dir, *(Path(r).expanduser() for r in self.config.access.roots)):
            try:
                r = p.resolve()
            except (OSError, RuntimeError):
                continue
            if r not in out:
                out.append(r)
        return out

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def ensure_dirs(self) -> None:
        """Create logs/, run/ and the outputs folder; a folder that cannot be
        made is a ConfigError naming it (and, for outputs_dir, the line).

        Each folder made here is 0700 (:mod:`backend.filemodes`): logs and run
        files hold prompts, argv and environments.  logs/ and run/ are only ever
        Specdeck's, so one an earlier version left 0755 is tightened; an outputs
        folder that exists already may be the user's own and keeps its mode."""
        from backend.filemodes import make_private_dirs, tighten_dir

        for d, what in ((self.logs_dir, "logs"), (self.run_dir, "run"), (self.outputs_dir, "outputs")):
            try:
                make_private_dirs(d)
                if not d.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, "not a folder")
                if what != "outputs":
                    tighten_dir(d)
            except OSError as exc:
                reason = _os_reason(exc)
                if what != "outputs":
                    raise ConfigError([f"{d}: cannot create the workspace's {what} folder: {reason}"]) from None
                line, key = None, "workspace.outputs_dir (not set, so the default 'outputs')"
                if "outputs_dir" in self.config.workspace.model_fields_set:
                    key = "workspace.outputs_dir"
                    try:
                        line = locate(self.config_path.read_text(encoding="utf-8"), ("workspace", "outputs_dir"))
                    except (OSError, ValueError):
                        pass
                where = f"{self.config_path}:{line}" if line else str(self.config_path)
                raise ConfigError([f"{where}: {key}: cannot create {d}: {reason}"]) from None

    def process_specs(self) -> list[ProcessSpec]:
        """Specs of the [[process]] entries (servers add theirs elsewhere)."""
        specs = []
        for p in self.config.process:
            cwd = p.cwd
            if cwd is not None and not Path(cwd).expanduser().is_absolute():
                cwd = str(self.root / cwd)
            specs.append(
                ProcessSpec(
                    name=p.name,
                    kind=p.kind,
                    argv=tuple(p.argv),
                    log_path=str(self.log_path(p.name)),
                    cwd=cwd,
                    env=dict(p.env),
                    readiness=ReadinessProbe(**p.readiness.model_dump()),
                    stop_grace_s=p.stop_grace_s,
                    restart=RestartPolicy(**p.restart.model_dump()),
                    log_max_bytes=int(p.log_max_mb * 2**20),
                    log_keep=p.log_keep,
                    where=p.where,
                    num_gpus=p.num_gpus,
                    num_cpus=p.num_cpus,
                    resources=dict(p.resources),
                )
            )
        return specs

    def autostart_names(self) -> list[str]:
        return [p.name for p in self.config.process if p.autostart]


# -- loading -------------------------------------------------------------


def default_home() -> Path:
    return Path(os.environ.get("SPECDECK_HOME") or Path.home() / ".specdeck").expanduser()


def resolve_root(path: str | Path | None) -> Path:
    """The workspace folder: the argument, else $SPECDECK_WORKSPACE, else the demo."""
    chosen = path or os.environ.get("SPECDECK_WORKSPACE")
    if chosen:
        return Path(chosen).expanduser().resolve()
    return (default_home() / "demo").resolve()


def load_workspace(path: str | Path | None = None, *, create_demo: bool | None = None,
                   model: type[WorkspaceConfig] = WorkspaceConfig, checks: Sequence[TableCheck] = (),
                   write_demo: Callable[[Path], Any] | None = None) -> Workspace:
    """Open the workspace at ``path`` (see :func:`resolve_root`); ``model`` and ``checks`` as for
    :func:`parse_config`, ``write_demo(root)`` writes the demo workspace.  The dashboard and the
    command line open it through :func:`backend.flows.workspace.load_workspace`, which passes the
    domains' parts.

    With no folder chosen, the demo workspace is created when missing.  A
    chosen folder without a config file is an error that says how to make
    one (a mistyped path must not turn into a demo that starts processes);
    ``create_demo=True`` writes the demo config there instead.
    """
    explicit = bool(path or os.environ.get("SPECDECK_WORKSPACE"))
    if create_demo is None:
        create_demo = not explicit
    root = resolve_root(path)
    cfg_path = root / CONFIG_NAME
    try:
        if root.exists() and not root.is_dir():
            raise ConfigError([f"{root}: is a file, not a workspace folder; "
                               f"pass the folder that holds {CONFIG_NAME}"])
        missing = not cfg_path.exists() and not cfg_path.is_symlink()
    except OSError as exc:
        raise ConfigError([f"{cfg_path}: cannot look at it: {_os_reason(exc)}"]) from None
    if missing:
        if not create_demo:
            raise ConfigError([f"{cfg_path}: no workspace config here; run `python -m backend.cli init {root}`"])
        if write_demo is None:
            raise ConfigError([f"{cfg_path}: no workspace config here, and no demo to write"])
        try:
            write_demo(root)
        except OSError as exc:
            raise ConfigError([f"{cfg_path}: cannot write the demo workspace: {_os_reason(exc)}"]) from None
    cfg = parse_config(read_config_text(cfg_path), cfg_path, model=model, checks=checks)
    ws = Workspace(root=root, config_path=cfg_path, config=cfg, model=model, checks=tuple(checks))
    ws.ensure_dirs()
    return ws


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, FileExistsError):
        return "a file of that name is in the way"
    return exc.strerror or str(exc)


def read_config_text(path: Path) -> str:
    """The config file's text; a folder, an unreadable file or bytes that are
    not UTF-8 are a ConfigError (``file[:line]: reason``)."""
    from backend.readcap import CONFIG_JSON_MAX, TooLarge, read_bytes_whole

    try:
        data = read_bytes_whole(path, CONFIG_JSON_MAX, "a workspace config")
    except TooLarge as exc:
        raise ConfigError([str(exc)]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a folder, not a config file; "
                           f"the workspace config is a TOML file named {CONFIG_NAME}"]) from None
    except FileNotFoundError:
        raise ConfigError([f"{path}: the config file is gone"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read it: {_os_reason(exc)}"]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError([f"{path}:{line}: not UTF-8 text: byte 0x{data[exc.start]:02x} at column {column} "
                           "(save the file as UTF-8)"]) from None


def parse_config(text: str, path: Path | str = CONFIG_NAME, *, model: type[WorkspaceConfig] = WorkspaceConfig,
                 checks: Sequence[TableCheck] = ()) -> WorkspaceConfig:
    """Parse and validate config text; raise ConfigError listing every problem.

    ``model``: the config model (a subclass may type the domains' tables); ``checks``: the domains'
    checks of their tables, run in order after the model (see backend.flows.workspace)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{path}:{m.group(1)}" if m else str(path)
        raise ConfigError([f"{where}: TOML syntax: {exc}"]) from None
    try:
        cfg = model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([describe_error(err, text, path) for err in exc.errors()]) from None
    problems = _unique_process_names(cfg, text, path) + _where_needs_cluster(cfg, text, path)
    for check in checks:
        problems += check(cfg, text, path)
    if problems:
        raise ConfigError(problems)
    return cfg


def _unique_process_names(cfg: WorkspaceConfig, text: str, path: Path | str) -> list[str]:
    problems: list[str] = []
    first: dict[str, int] = {}
    for i, p in enumerate(cfg.process):
        if p.name in first:
            j = first[p.name]
            problems.append(f"{path}:{locate(text, ('process', i, 'name'))}: process[{i}].name: {p.name!r} is used "
                            f"twice (first by process[{j}] at line {locate(text, ('process', j, 'name'))})")
        else:
            first[p.name] = i
    return problems


def _where_needs_cluster(cfg: WorkspaceConfig, text: str, path: Path | str) -> list[str]:
    """``where = "ray"`` on any entry of a workspace without ``[cluster]``: one problem per entry."""
    if cfg.cluster is not None:
        return []
    problems: list[str] = []
    for table in ("process", "server", "router", "train"):
        for i, entry in enumerate(getattr(cfg, table)):
            where = entry.where if isinstance(entry, ProcessConfig) else entry.get("where")
            if where == "ray":
                problems.append(f"{path}:{locate(text, (table, i, 'where'))}: {table}[{i}].where: \"ray\" needs a "
                                "[cluster] section (kind = \"ray\", address = \"local\" or \"http://HOST:8265\")")
    return problems


# -- writing back ----------------------------------------------------------


def update_server_entry(ws: Workspace, name: str, values: dict[str, Any]) -> None:
    """Write ``values`` into the ``[[server]]`` entry called ``name``, in place.

    Keys whose value changed are rewritten, new keys are added, keys set to
    ``None`` are removed; a sub-table the entry lacks (``[server.cuda_graph]``)
    is added only when it gets at least one real value.  Every other line,
    comments included, stays as it was (tomlkit).  The new text is validated
    before it atomically replaces the file, so a bad edit never loses what
    was written.
    """
    update_entry(ws, "server", name, values)


def update_entry(ws: Workspace, table: str, name: str, values: dict[str, Any], *, create: bool = False) -> None:
    """Write ``values`` into the ``[[table]]`` entry called ``name`` (see :func:`update_server_entry`).

    With ``create``, an entry of that name that does not exist yet is appended at the end of the file.
    """
    import tomlkit

    text = ws.config_path.read_text(encoding="utf-8")
    doc = tomlkit.parse(text)
    for entry in doc.get(table) or []:
        if entry.get("name") == name:
            _merge_table(entry, values)
            break
    else:
        if not create:
            raise ConfigError([f"{ws.config_path}: there is no [[{table}]] entry named {name!r}"])
        entry = tomlkit.table()
        entry.trivia.indent = "\n"  # a blank line before its [[table]] header
        entry.add("name", name)
        _merge_table(entry, {k: v for k, v in values.items() if k != "name"})
        if table not in doc:
            doc.add(tomlkit.nl())
            doc.add(table, tomlkit.aot())
        doc[table].append(entry)
    new_text = tomlkit.dumps(doc)
    cfg = parse_config(new_text, ws.config_path, model=ws.model, checks=ws.checks)  # raises before anything is written
    from backend.filemodes import write_private

    write_private(ws.config_path, new_text)  # atomic, 0600: the file names models, paths and hosts
    ws.config = cfg


def _merge_table(table: Any, values: dict[str, Any]) -> None:
    """Merge ``values`` into the tomlkit ``table``; ``None`` removes a key and never reaches tomlkit."""
    import tomlkit

    for key, value in values.items():
        if value is None:
            if key in table:
                del table[key]
        elif isinstance(value, dict) and isinstance(table.get(key), dict):
            _merge_table(table[key], value)
        elif isinstance(value, dict):
            real = _without_none(value)
            if real:  # a missing optional table is created only to hold real values
                sub = tomlkit.table()
                for k, v in real.items():
                    sub.add(k, v)
                sub.add(tomlkit.nl())
                table[key] = sub
        elif key not in table or table[key] != value:
            table[key] = value


def _without_none(value: Any) -> Any:
    """``value`` with every ``None`` (and every table left empty by that) dropped."""
    if isinstance(value, dict):
        out = {k: _without_none(v) for k, v in value.items() if v is not None}
        return {k: v for k, v in out.items() if not (isinstance(v, dict) and not v)}
    if isinstance(value, list):
        return [_without_none(v) for v in value if v is not None]
    return value
